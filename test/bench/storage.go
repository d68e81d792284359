package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/test/storecrash"
)

// storeOpenProbeCommand is the hidden first argument that makes the bench
// binary open one store once (storeopen), in a fresh process.
const storeOpenProbeCommand = "__storeopen"

// Store open modes measured by storeopen.
const (
	openBadger  = "badger"  // badger.Open with the store's options, no checks
	openChecked = "checked" // persistence.Open: the lock, every table verified, then badger
	openVerify  = "verify"  // persistence.Verify: the whole offline check
)

// storeOpenResult is what one probe measured.
type storeOpenResult struct {
	Ms         float64 `json:"ms"`
	Tables     int     `json:"tables"`
	TableBytes int64   `json:"table_bytes"`
}

// runStoreOpen fills data dirs with e.jobs jobs through a manager process
// (stopped gracefully, so the store is in tables, as after any restart),
// then opens each, in fresh processes, with plain badger, with
// persistence.Open (every table checksum-verified first) and with the
// offline verify: the cost of the integrity check at open.
func runStoreOpen(ctx context.Context, e *env) error {
	sizes := slices.Sorted(slices.Values(e.jobs))
	type row struct {
		jobs    int
		diskMiB float64
		res     map[string][]storeOpenResult
	}
	var rows []row
	for _, n := range sizes {
		d := filepath.Join(e.dir(fmt.Sprintf("storeopen-%d", n)), "data")
		p, err := populate(ctx, e, d, 0, n)
		if err != nil {
			return err
		}
		r := row{jobs: n, diskMiB: p.diskMiB, res: map[string][]storeOpenResult{}}
		for range e.probes {
			for _, mode := range []string{openBadger, openChecked, openVerify} {
				res, err := storeOpenProbe(ctx, d, mode)
				if err != nil {
					return fmt.Errorf("%s open of %d jobs: %w", mode, n, err)
				}
				r.res[mode] = append(r.res[mode], res)
			}
		}
		rows = append(rows, r)
	}
	w := e.out
	fmt.Fprintln(w, "## storeopen")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Data dirs filled through a norsk-manager process (the recovery job shape) and stopped gracefully, so the store is in tables; "+
		"each open in a fresh process, page cache warm; min / median / max of %d opens, ms:\n\n", e.probes)
	fmt.Fprintln(w, "| jobs | data dir MiB | tables (MiB) | badger.Open alone | persistence.Open (tables verified, then badger) | added by the check | norsk-manager verify (everything) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		b, c, v := msStats(r.res[openBadger]), msStats(r.res[openChecked]), msStats(r.res[openVerify])
		first := r.res[openChecked][0]
		fmt.Fprintf(w, "| %d | %.1f | %d (%.1f) | %s | %s | %.0f | %s |\n", r.jobs, r.diskMiB, first.Tables, float64(first.TableBytes)/(1<<20),
			b, c, medianMs(r.res[openChecked])-medianMs(r.res[openBadger]), v)
	}
	fmt.Fprintln(w)
	return nil
}

func msStats(rs []storeOpenResult) string {
	ms := make([]float64, len(rs))
	for i, r := range rs {
		ms[i] = r.Ms
	}
	slices.Sort(ms)
	return fmt.Sprintf("%.0f / %.0f / %.0f", ms[0], ms[len(ms)/2], ms[len(ms)-1])
}

func medianMs(rs []storeOpenResult) float64 {
	ms := make([]float64, len(rs))
	for i, r := range rs {
		ms[i] = r.Ms
	}
	slices.Sort(ms)
	return ms[len(ms)/2]
}

// storeOpenProbe runs one open in a fresh bench process.
func storeOpenProbe(ctx context.Context, dir, mode string) (storeOpenResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return storeOpenResult{}, err
	}
	cmd := exec.CommandContext(ctx, exe, storeOpenProbeCommand, "--dir", dir, "--mode", mode)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return storeOpenResult{}, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	var r storeOpenResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return storeOpenResult{}, fmt.Errorf("probe output %q: %w", stdout.String(), err)
	}
	return r, nil
}

// runStoreOpenProbe is the probe process: open (and close) the store once.
func runStoreOpenProbe(args []string) error {
	fs := flag.NewFlagSet(storeOpenProbeCommand, flag.ContinueOnError)
	dir := fs.String("dir", "", "data dir")
	mode := fs.String("mode", openChecked, "badger, checked or verify")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var r storeOpenResult
	t0 := time.Now()
	switch *mode {
	case openBadger:
		cfg := persistence.DefaultConfig(*dir)
		opts := badger.DefaultOptions(filepath.Join(*dir, "store")).WithSyncWrites(true).WithDetectConflicts(false).
			WithNumVersionsToKeep(1).WithMemTableSize(cfg.MemTableSize).WithBlockCacheSize(cfg.BlockCacheSize).WithLogger(nil)
		db, err := badger.Open(opts)
		if err != nil {
			return err
		}
		r.Ms = msSince(t0)
		for _, t := range db.Tables() {
			r.Tables++
			r.TableBytes += int64(t.OnDiskSize)
		}
		if err := db.Close(); err != nil {
			return err
		}
	case openChecked:
		s, err := persistence.Open(persistence.DefaultConfig(*dir))
		if err != nil {
			return err
		}
		r.Ms = msSince(t0)
		if err := s.Close(); err != nil {
			return err
		}
		rep, err := persistence.Verify(context.Background(), *dir, nil) // for the table counts only
		if err != nil {
			return err
		}
		r.Tables, r.TableBytes = rep.Store.Tables, rep.Store.TableBytes
	case openVerify:
		rep, err := persistence.Verify(context.Background(), *dir, nil)
		if err != nil {
			return err
		}
		if !rep.Sound() {
			return fmt.Errorf("verify found damage: %v", rep.Damage)
		}
		r.Ms = msSince(t0)
		r.Tables, r.TableBytes = rep.Store.Tables, rep.Store.TableBytes
	default:
		return fmt.Errorf("--mode %q: want badger, checked or verify", *mode)
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// runStoreCrash runs test/storecrash's kill-and-restart rounds for both
// stores, random instants and (with strace) injected ones, with
// e.crashIterations kills each.
func runStoreCrash(ctx context.Context, e *env) error {
	bin, err := storecrash.BuildWriter(ctx, e.dir("storecrash-bin"))
	if err != nil {
		return err
	}
	kindSets := [][]string{{storecrash.KindDelay, storecrash.KindAcks}}
	if _, err := exec.LookPath("strace"); err == nil {
		kindSets = append(kindSets, []string{storecrash.KindInject, storecrash.KindAcks})
	}
	w := e.out
	fmt.Fprintln(w, "## storecrash")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A writer process SIGKILLed %d times per row and restarted (test/storecrash); every restart must open the store the first time "+
		"with every acknowledged write:\n\n", e.crashIterations)
	fmt.Fprintln(w, "| store | kills | restarts, all first-time | acknowledged writes checked | kills that left an empty log | slowest open ms | took s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, store := range []storecrash.Store{storecrash.FSM, storecrash.Raft} {
		for _, kinds := range kindSets {
			start := time.Now()
			res, err := storecrash.Run(ctx, storecrash.Config{Writer: bin, Store: store, Dir: filepath.Join(e.dir("storecrash"), "data"),
				Iterations: e.crashIterations, Kinds: kinds, Seed: uint64(time.Now().UnixNano())})
			if err != nil {
				return fmt.Errorf("%s %v: %w", store, kinds, err)
			}
			fmt.Fprintf(w, "| %s | %v | %d | %d | %d (%d logs) | %.0f | %.0f |\n", store, res.Kills, res.Restarts, res.Acked,
				res.EmptyLogKills, res.EmptyLogs, float64(res.SlowestOpen.Microseconds())/1000, time.Since(start).Seconds())
			if len(res.Injected) > 0 {
				fmt.Fprintf(w, "| | injected at: %v | | | | | |\n", res.Injected)
			}
		}
	}
	fmt.Fprintln(w)
	return nil
}
