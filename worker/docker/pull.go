package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// ensureImages inspects every image of the project and pulls the missing
// ones (compose stage BUILD). It returns the inspected images by
// reference.
func (j *job) ensureImages(ctx context.Context) (map[string]image.InspectResponse, error) {
	out := map[string]image.InspectResponse{}
	var refs []string
	for _, s := range j.svcs {
		if _, seen := out[s.spec.Image]; !seen {
			out[s.spec.Image] = image.InspectResponse{}
			refs = append(refs, s.spec.Image)
		}
	}
	j.compose(stageBuild, fmt.Sprintf("checking %d images", len(refs)))
	for _, ref := range refs {
		ictx, cancel := context.WithTimeout(ctx, engineTimeout)
		info, err := j.r.cli.ImageInspect(ictx, ref)
		cancel()
		if err == nil {
			out[ref] = info
			continue
		}
		if !client.IsErrNotFound(err) {
			return nil, fmt.Errorf("inspect image %s: %w", ref, err)
		}
		if info, err = j.pull(ctx, ref); err != nil {
			return nil, err
		}
		out[ref] = info
	}
	return out, nil
}

// pull pulls ref (bounded by Config.PullTimeout) and inspects it.
func (j *job) pull(ctx context.Context, ref string) (image.InspectResponse, error) {
	began := time.Now()
	j.compose(stageBuild, "pulling image "+ref)
	j.log.Info("pulling image", "image", ref)
	ctx, cancel := context.WithTimeout(ctx, j.r.cfg.PullTimeout)
	defer cancel()
	rc, err := j.r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err == nil {
		err = readPull(rc, pullProgressEvery, func(p pullProgress) {
			j.compose(stageBuild, fmt.Sprintf("pulling image %s: %s", ref, p))
		})
		_ = rc.Close()
	}
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("gave up after %s (PullTimeout): %w", j.r.cfg.PullTimeout, err)
		}
		return image.InspectResponse{}, fmt.Errorf("pull image %s: %w", ref, err)
	}
	info, err := j.r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return image.InspectResponse{}, fmt.Errorf("inspect pulled image %s: %w", ref, err)
	}
	j.compose(stageBuild, fmt.Sprintf("pulled image %s in %s", ref, time.Since(began).Round(time.Millisecond)))
	return info, nil
}

// pullProgressEvery is how often a pull in progress is reported.
const pullProgressEvery = 5 * time.Second

// pullProgress sums the layers of a pull as the engine reports them.
type pullProgress struct {
	layers, done   int
	current, total int64 // bytes downloaded, of the layers whose size is known
}

// String reads like "3 of 7 layers done, 120.0 of 300.0 MB".
func (p pullProgress) String() string {
	return fmt.Sprintf("%d of %d layers done, %.1f of %.1f MB", p.done, p.layers, float64(p.current)/1e6, float64(p.total)/1e6)
}

// readPull reads the engine's pull stream (JSON messages) to its end,
// calling report with the progress at most once per every, and returns
// the error the stream reports, if any.
func readPull(r io.Reader, every time.Duration, report func(pullProgress)) error {
	type layer struct {
		current, total int64
		done           bool
	}
	layers := map[string]*layer{}
	var order []string
	last := time.Now()
	dec := json.NewDecoder(r)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the engine's pull progress: %w", err)
		}
		if m.Error != nil {
			return m.Error
		}
		if m.ErrorMessage != "" {
			return errors.New(m.ErrorMessage)
		}
		if m.ID == "" || m.Progress == nil && m.Status != "Pull complete" && m.Status != "Already exists" {
			continue
		}
		l := layers[m.ID]
		if l == nil {
			l = &layer{}
			layers[m.ID] = l
			order = append(order, m.ID)
		}
		switch {
		case m.Status == "Pull complete" || m.Status == "Already exists":
			l.done = true
		case m.Status == "Downloading" && m.Progress != nil:
			l.current, l.total = m.Progress.Current, max(l.total, m.Progress.Total)
		}
		if time.Since(last) >= every {
			last = time.Now()
			var p pullProgress
			for _, id := range order {
				l := layers[id]
				p.layers++
				if l.done {
					p.done++
					l.current = l.total
				}
				p.current += l.current
				p.total += l.total
			}
			report(p)
		}
	}
}
