package dockerenv

import (
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
)

// TestLeftoversAndCleanup labels a running container, a stopped one, a
// network and a volume; Leftovers lists exactly them, and Cleanup (run at
// the end of a subtest) removes them all.
func TestLeftoversAndCleanup(t *testing.T) {
	cli := Client(t)
	ref := ProbeImage(t, cli)
	value := uniqueValue(t)
	other := uniqueValue(t) // a second value of the same key: not listed
	Cleanup(t, cli, runLabel, other)
	labels := map[string]string{runLabel: value}

	if left, err := Leftovers(t.Context(), cli, runLabel, value); len(left) != 0 || err != nil {
		t.Fatalf("leftovers before the test: %q, %v", left, err)
	}
	t.Run("create", func(t *testing.T) {
		Cleanup(t, cli, runLabel, value) // runs when this subtest ends
		if _, err := cli.NetworkCreate(t.Context(), "norsk-test-"+value, network.CreateOptions{Labels: labels}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: "norsk-test-" + value, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		startProbe(t, cli, ref, value+"-running", value, container.Config{Cmd: []string{"sleep"}}, container.HostConfig{})
		stopped := startProbe(t, cli, ref, value+"-stopped", value, container.Config{Cmd: []string{"exit", "1"}}, container.HostConfig{})
		waitExit(t, cli, stopped)
		waitExit(t, cli, startProbe(t, cli, ref, other, other, container.Config{Cmd: []string{"exit", "0"}}, container.HostConfig{}))

		left, err := Leftovers(t.Context(), cli, runLabel, value)
		want := []string{
			"container norsk-test-" + value + "-running (running)",
			"container norsk-test-" + value + "-stopped (exited)",
			"network norsk-test-" + value,
			"volume norsk-test-" + value,
		}
		if err != nil || !slices.Equal(left, want) {
			t.Errorf("Leftovers = %q, %v; want %q", left, err, want)
		}
		// An empty value matches every value of the key.
		all, err := Leftovers(t.Context(), cli, runLabel, "")
		if err != nil || !slices.Contains(all, "container norsk-test-"+other+" (exited)") || !slices.Contains(all, want[0]) {
			t.Errorf("Leftovers of any value = %q, %v; want ours and the other", all, err)
		}
	})
	if left, err := Leftovers(t.Context(), cli, runLabel, value); len(left) != 0 || err != nil {
		t.Errorf("leftovers after Cleanup: %q, %v", left, err)
	}
	if left, _ := Leftovers(t.Context(), cli, runLabel, other); len(left) != 1 {
		t.Errorf("Cleanup of %s removed another value's container: %q", value, left)
	}
}
