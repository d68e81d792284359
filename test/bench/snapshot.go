package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// snapshotResult is one size's measurements of runSnapshot.
type snapshotResult struct {
	jobs    int
	fileMiB float64
	dirMiB  float64
	save    []float64 // seconds per norsk-ctl operator snapshot save
	restore []float64 // seconds per norsk-manager restore
}

// runSnapshot fills data dirs with e.jobs jobs (as recovery does, each size
// continuing a copy of the previous one), then, e.probes times per size:
// saves a snapshot from a manager on it with norsk-ctl (wall time of the
// command: the stream, the fsync, the check of the file and the rename),
// restores it into a new data dir with norsk-manager restore, and starts a
// manager on the restored dir until its API answers (checked, not timed:
// startManager's wait is paced by gRPC's one-second reconnect backoff;
// the recovery scenario times manager starts).
func runSnapshot(ctx context.Context, e *env) error {
	bin, err := e.binaries(ctx)
	if err != nil {
		return err
	}
	sizes := slices.Sorted(slices.Values(e.jobs))
	var results []snapshotResult
	prev, have := "", 0
	for _, n := range sizes {
		d := filepath.Join(e.dir(fmt.Sprintf("snapshot-%d", n)), "data")
		if prev != "" {
			if err := os.CopyFS(d, os.DirFS(prev)); err != nil {
				return fmt.Errorf("copy %s to %s: %w", prev, d, err)
			}
		}
		if _, err := populate(ctx, e, d, have, n); err != nil {
			return err
		}
		prev, have = d, n
		r := snapshotResult{jobs: n, dirMiB: dirMiB(d)}
		m, err := e.startManager(ctx, d, "")
		if err != nil {
			return err
		}
		for i := range e.probes {
			file := filepath.Join(e.dir("snapshot-file"), "backup.nmb")
			took, err := timed(ctx, filepath.Join(bin, "norsk-ctl"), "--manager-url", m.addr, "operator", "snapshot", "save", file)
			if err != nil {
				_ = m.stop()
				return err
			}
			r.save = append(r.save, took)
			if fi, err := os.Stat(file); err == nil {
				r.fileMiB = float64(fi.Size()) / (1 << 20)
			}
			restored := filepath.Join(e.dir("snapshot-restored"), "data")
			if took, err = timed(ctx, filepath.Join(bin, "norsk-manager"), "restore", "--from", file, "--data-dir", restored); err != nil {
				_ = m.stop()
				return err
			}
			r.restore = append(r.restore, took)
			rm, err := e.startManager(ctx, restored, "")
			if err != nil {
				_ = m.stop()
				return err
			}
			if err := rm.stop(); err != nil {
				return err
			}
			if i < e.probes-1 {
				os.RemoveAll(filepath.Dir(restored))
				os.RemoveAll(filepath.Dir(file))
			}
		}
		if err := m.stop(); err != nil {
			return err
		}
		results = append(results, r)
	}
	printSnapshot(e, results)
	return nil
}

// timed runs a command to its end and returns its wall time in seconds.
func timed(ctx context.Context, exe string, args ...string) (float64, error) {
	start := time.Now()
	out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s %v: %w\n%s", filepath.Base(exe), args, err, out)
	}
	return time.Since(start).Seconds(), nil
}

func printSnapshot(e *env, rs []snapshotResult) {
	w := e.out
	fmt.Fprintln(w, "## snapshot")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Online snapshot of a single manager (idle) with norsk-ctl, restore into a new data dir (a manager was started on each); "+
		"medians of %d, wall time of each command:\n\n", e.probes)
	fmt.Fprintln(w, "| jobs | data dir MiB | snapshot file MiB | save s | save MiB/s | restore s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rs {
		save := median(r.save)
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.2f | %.0f | %.2f |\n", r.jobs, r.dirMiB, r.fileMiB, save, r.fileMiB/save, median(r.restore))
	}
	fmt.Fprintln(w)
}
