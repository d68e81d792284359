package dockerenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// cleanupTimeout bounds the removals of Cleanup, including waiting for
// removals the engine had already started.
const cleanupTimeout = time.Minute

// labelled is what carries a label: its kind ("container", "network",
// "volume"), the id to remove it by, and a human-readable description.
type labelled struct {
	kind, id, desc string
}

// labelFilter matches labelKey=labelValue, or any value of labelKey when
// labelValue is empty.
func labelFilter(labelKey, labelValue string) filters.Args {
	if labelValue == "" {
		return filters.NewArgs(filters.Arg("label", labelKey))
	}
	return filters.NewArgs(filters.Arg("label", labelKey+"="+labelValue))
}

// Leftovers lists the containers (running or not), networks and volumes
// carrying the label labelKey=labelValue (any value of labelKey if
// labelValue is empty), described as "container <name> (<state>)",
// "network <name>" and "volume <name>": containers first, then networks,
// then volumes, each sorted. A test asserts that it left nothing behind with
// an empty result. The error joins the failures of the three listings; what
// the others found is returned with it.
func Leftovers(ctx context.Context, cli client.APIClient, labelKey, labelValue string) ([]string, error) {
	items, err := listLabelled(ctx, cli, labelKey, labelValue)
	descs := make([]string, len(items))
	for i, it := range items {
		descs[i] = it.desc
	}
	return descs, err
}

// listLabelled lists what Leftovers describes, in the same order.
func listLabelled(ctx context.Context, cli client.APIClient, labelKey, labelValue string) ([]labelled, error) {
	f := labelFilter(labelKey, labelValue)
	var items []labelled
	var errs []error
	sorted := func(from int) {
		slices.SortFunc(items[from:], func(a, b labelled) int { return strings.Compare(a.desc, b.desc) })
	}
	if cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err != nil {
		errs = append(errs, fmt.Errorf("listing containers: %w", err))
	} else {
		for _, c := range cs {
			name := c.ID
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			items = append(items, labelled{"container", c.ID, fmt.Sprintf("container %s (%s)", name, c.State)})
		}
		sorted(0)
	}
	from := len(items)
	if ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f}); err != nil {
		errs = append(errs, fmt.Errorf("listing networks: %w", err))
	} else {
		for _, n := range ns {
			items = append(items, labelled{"network", n.ID, "network " + n.Name})
		}
		sorted(from)
	}
	from = len(items)
	if vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f}); err != nil {
		errs = append(errs, fmt.Errorf("listing volumes: %w", err))
	} else {
		for _, v := range vs.Volumes {
			items = append(items, labelled{"volume", v.Name, "volume " + v.Name})
		}
		sorted(from)
	}
	return items, errors.Join(errs...)
}

// Cleanup registers a t.Cleanup that force-removes the containers (with
// their anonymous volumes), networks and volumes carrying the label
// labelKey=labelValue (any value of labelKey if labelValue is empty), so a
// failed test does not leave them to the next. It logs what it removes and
// reports an error on t if something is still there after a minute.
// Register it after Client, so it runs before the client is closed.
func Cleanup(t testing.TB, cli client.APIClient, labelKey, labelValue string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := removeLabelled(ctx, t, cli, labelKey, labelValue); err != nil {
			t.Errorf("cleanup of %s=%s: %v", labelKey, labelValue, err)
		}
	})
}

// removeLabelled removes everything labelled until a listing comes back
// empty, polling every 100 ms (removals the engine already has in progress
// finish on their own), and returns the last failure if ctx ends first.
func removeLabelled(ctx context.Context, t testing.TB, cli client.APIClient, labelKey, labelValue string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		items, err := listLabelled(ctx, cli, labelKey, labelValue)
		if err == nil && len(items) == 0 {
			return nil
		}
		if err != nil {
			last = err
		}
		for _, it := range items {
			var err error
			switch it.kind {
			case "container":
				err = cli.ContainerRemove(ctx, it.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
			case "network":
				err = cli.NetworkRemove(ctx, it.id)
			case "volume":
				err = cli.VolumeRemove(ctx, it.id, true)
			}
			switch {
			case err == nil:
				t.Logf("cleanup: removed %s", it.desc)
			case !cerrdefs.IsNotFound(err):
				last = fmt.Errorf("removing %s: %w", it.desc, err)
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("still present after %s: %w", cleanupTimeout, last)
		case <-tick.C:
		}
	}
}
