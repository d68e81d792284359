package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// procMem is a process's resident memory from /proc/<pid>/status: its peak
// since it started (VmHWM) and now (VmRSS), in bytes.
type procMem struct{ peak, now uint64 }

// readProcMem reads /proc/<pid>/status; a process gone or a field missing
// is an error naming the file.
func readProcMem(pid int) (procMem, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return procMem{}, err
	}
	return parseProcMem(path, string(b))
}

// parseProcMem takes the VmHWM and VmRSS lines ("VmRSS:\t  123456 kB") of
// a /proc/<pid>/status text.
func parseProcMem(path, status string) (procMem, error) {
	var m procMem
	var seen int
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("%s: %s: %q is not a size in kB", path, k, strings.TrimSpace(v))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		if k == "VmHWM" {
			m.peak = kb << 10
		} else {
			m.now = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return m, fmt.Errorf("%s: no VmHWM and VmRSS lines", path)
	}
	return m, nil
}

// mib formats bytes as MiB.
func mib(b uint64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }

// fetchHeapProfile writes the heap profile of the manager serving
// /debug/pprof on addr (norsk-manager --metrics-addr --enable-debug) to
// path, after a GC (gc=1), so that inuse_space is the live heap.
func fetchHeapProfile(ctx context.Context, addr, path string) error {
	url := "http://" + addr + "/debug/pprof/heap?gc=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.ReadFrom(resp.Body)
	return errors.Join(err, f.Close())
}
