//go:build linux

package cpuset

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPinned starts a child through Pinned and reads its own
// Cpus_allowed_list: the child runs on exactly the list, and the calling
// goroutine's mask is left as it was.
func TestPinned(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	want := allowed[len(allowed)-1] // one CPU this test may use
	var out strings.Builder
	cmd := exec.Command("/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status")
	cmd.Stdout = &out
	if err := Pinned([]uint32{want}, cmd.Run); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out.String()), "Cpus_allowed_list:"))
	if got != strconv.Itoa(int(want)) {
		t.Fatalf("child Cpus_allowed_list %q; want %d", got, want)
	}
	after, err := Allowed()
	if err != nil || !slices.Equal(after, allowed) {
		t.Fatalf("mask after Pinned = %v, %v; want %v unchanged", after, err, allowed)
	}
}

// TestPinned_Refused: an empty list, an id beyond the mask's size and a
// CPU this process may not use are refused before anything starts.
func TestPinned_Refused(t *testing.T) {
	started := func() error { t.Error("start ran"); return nil }
	if err := Pinned(nil, started); err == nil {
		t.Error("Pinned(nil) = nil; want an error")
	}
	if err := Pinned([]uint32{5000}, started); err == nil {
		t.Error("Pinned(5000) = nil; want an error")
	}
	allowed, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(allowed, 1023) {
		t.Skip("cpu 1023 is allowed here")
	}
	if err := Pinned([]uint32{1023}, started); err == nil {
		t.Error("Pinned(a cpu not allowed) = nil; want EINVAL")
	}
}
