package main

import (
	"context"
	"fmt"
	"github.com/norsk-oss/norsk-manager/persistence"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// callTimeout bounds one request of the closed loops; a request that takes
// longer counts as an error.
const callTimeout = 30 * time.Second

// runCreateJob measures CreateJob on a norsk-manager process at each client
// count and, next to it, raw badger synced single-key transactions of the
// size of one CreateJob append at the same concurrency.
func runCreateJob(ctx context.Context, e *env) error {
	etcdVer := ""
	if e.peerEtcd != "" {
		v, err := etcdVersion(ctx, e.peerEtcd)
		if err != nil {
			return err
		}
		etcdVer = v
	}
	size, err := measureAppend(ctx, e.dir("size-probe"))
	if err != nil {
		return fmt.Errorf("measure the append size: %w", err)
	}
	mgr, raw, etcd := map[int][]runStats{}, map[int][]runStats{}, map[int][]runStats{}
	for _, n := range e.clients {
		if mgr[n], raw[n], etcd[n], err = writeGroup(ctx, e, n, size.value); err != nil {
			return err
		}
	}
	printCreateJob(e, size, mgr, raw)
	if e.peerEtcd != "" {
		printEtcd(e, etcdVer, size, mgr, etcd)
	}
	return nil
}

// writeGroup runs e.runs rounds at concurrency n on a fresh manager data
// dir and a fresh badger dir (and, with --peer-etcd, a fresh etcd); each
// round is one CreateJob window followed by one raw badger window and one
// etcd Put window, so that all see the same disk and neighbours (the box
// is shared and its fsync cost drifts). Odd rounds run etcd first, so
// that neither side always follows the other.
func writeGroup(ctx context.Context, e *env, n int, val []byte) (mgr, raw, etcd []runStats, err error) {
	cj, err := newCreateJobLoad(ctx, e, n)
	if err != nil {
		return nil, nil, nil, err
	}
	defer cj.close()
	bl, err := newBadgerLoad(e, n, val)
	if err != nil {
		return nil, nil, nil, err
	}
	defer bl.close()
	var el *etcdLoad
	if e.peerEtcd != "" {
		if el, err = newEtcdLoad(ctx, e, n); err != nil {
			return nil, nil, nil, err
		}
		defer el.close()
	}
	for r := range e.runs {
		if el != nil && r%2 == 1 {
			etcd = append(etcd, el.run(ctx, r))
		}
		mgr = append(mgr, cj.run(ctx, r))
		raw = append(raw, bl.run(ctx, r))
		if el != nil && r%2 == 0 {
			etcd = append(etcd, el.run(ctx, r))
		}
		if ctx.Err() != nil {
			return nil, nil, nil, ctx.Err()
		}
	}
	if err := cj.close(); err != nil {
		return nil, nil, nil, err
	}
	if el != nil {
		if err := el.close(); err != nil {
			return nil, nil, nil, err
		}
	}
	return mgr, raw, etcd, bl.close()
}

// createJobLoad is n CreateJob clients, each with its own connection, on a
// manager process with a fresh data dir.
type createJobLoad struct {
	e     *env
	m     *manager
	conns []*grpc.ClientConn
	apis  []managerpb.ManagerClient
	seq   []int
}

func newCreateJobLoad(ctx context.Context, e *env, n int) (*createJobLoad, error) {
	profile := ""
	if e.cpuProfile {
		profile = filepath.Join(e.scratch, fmt.Sprintf("manager-cpu-%d.pprof", n))
	}
	m, err := e.startManager(ctx, filepath.Join(e.dir(fmt.Sprintf("createjob-%d", n)), "data"), profile)
	if err != nil {
		return nil, err
	}
	l := &createJobLoad{e: e, m: m, conns: make([]*grpc.ClientConn, n), apis: make([]managerpb.ManagerClient, n), seq: make([]int, n)}
	for c := range n {
		if l.conns[c], l.apis[c], err = dial(m.addr); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

// run is one warm-up + window; request ids are unique across runs.
func (l *createJobLoad) run(ctx context.Context, r int) runStats {
	cpu := windowCPU(l.m.cmd.Process.Pid, l.e.warmup, l.e.window)
	st := closedLoop(ctx, len(l.apis), l.e.warmup, l.e.window, func(ctx context.Context, c int) error {
		l.seq[c]++
		job := benchJob(fmt.Sprintf("bench-r%d-c%02d-%07d", r, c, l.seq[c]), c*1_000_000+l.seq[c])
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := l.apis[c].CreateJob(cctx, job)
		return err
	})
	st.serverCores, st.benchCores = cpu()
	return st
}

// close closes the connections and stops the manager (idempotent).
func (l *createJobLoad) close() error {
	for _, c := range l.conns {
		if c != nil {
			c.Close()
		}
	}
	l.conns = nil
	if l.m == nil {
		return nil
	}
	err := l.m.stop()
	l.m = nil
	return err
}

// badgerLoad is n writers on a fresh badger (SyncWrites, the manager's
// memtable and cache sizes), each committing one single-key transaction of
// val at a time (the bytes one CreateJob stores, so that they compress
// alike).
type badgerLoad struct {
	e   *env
	db  *badger.DB
	val []byte
	seq []int
}

func newBadgerLoad(e *env, n int, val []byte) (*badgerLoad, error) {
	dir := e.dir(fmt.Sprintf("badger-%d", n))
	def := persistence.DefaultConfig(dir) // the manager's own settings
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(!e.noSync).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(def.MemTableSize).
		WithBlockCacheSize(def.BlockCacheSize).
		WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger in %s: %w", dir, err)
	}
	return &badgerLoad{e: e, db: db, val: val, seq: make([]int, n)}, nil
}

func (l *badgerLoad) run(ctx context.Context, r int) runStats {
	cpu := windowCPU(0, l.e.warmup, l.e.window)
	st := closedLoop(ctx, len(l.seq), l.e.warmup, l.e.window, func(_ context.Context, c int) error {
		l.seq[c]++
		key := fmt.Appendf(nil, "ent/job/bench-r%d-c%02d-%07d", r, c, l.seq[c])
		return l.db.Update(func(txn *badger.Txn) error { return txn.Set(key, l.val) })
	})
	_, st.benchCores = cpu()
	return st
}

// close closes the database (idempotent).
func (l *badgerLoad) close() error {
	if l.db == nil {
		return nil
	}
	err := l.db.Close()
	l.db = nil
	return err
}

func printCreateJob(e *env, size appendSize, mgr, raw map[int][]runStats) {
	w := e.out
	fmt.Fprintf(w, "## createjob\n\n")
	fmt.Fprintf(w, "Load: closed loop, one gRPC connection per client, %s warm-up + %s window, %d run(s) per client count, "+
		"fresh data dir per client count (the runs share it); CreateJob and raw badger windows alternate. Each cell: min / median / max over the runs.\n\n",
		e.warmup, e.window, e.runs)
	fmt.Fprintf(w, "Job: %d bytes marshalled (4 tags, 1 service with command, config and a port mapping). "+
		"One CreateJob stores %d value bytes: the entity (seq ‖ flag ‖ JobRecord of %d bytes) = %d bytes, "+
		"plus %d event(s) in the event log = %d bytes; and about %d bytes of index keys.\n\n",
		size.job, size.total(), size.record, size.entity, size.numEvents, size.events, size.indexKeys)
	sync := "fsync on"
	if e.noSync {
		sync = "**--unsafe-no-fsync**, a diagnostic: acknowledged writes are not durable"
		fmt.Fprintln(w, "**No fsync anywhere in this run (--unsafe-no-fsync): not comparable with durable numbers.**")
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "### CreateJob on a norsk-manager process (%s)\n", sync)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| clients | CreateJob/s | p50 ms | p99 ms | max ms | errors | CPU cores: manager + bench | CreateJob/s per run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, n := range e.clients {
		fmt.Fprintln(w, groupRow(fmt.Sprint(n), mgr[n], true))
	}
	printErrors(e, mgr)
	fmt.Fprintln(w)
	printCPUPerWrite(e, mgr)
	fmt.Fprintf(w, "### Raw badger: single-key transactions of %d bytes (SyncWrites %t)\n\n", size.total(), !e.noSync)
	fmt.Fprintln(w, "| writers | txns/s | p50 ms | p99 ms | max ms | errors | CPU cores | txns/s per run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, n := range e.clients {
		fmt.Fprintln(w, groupRow(fmt.Sprint(n), raw[n], false))
	}
	printErrors(e, raw)
	fmt.Fprintln(w)
	printCreateJobTargets(e, mgr, raw)
	if e.cpuProfile {
		fmt.Fprintln(w, "The manager ran as `go run ./test/bench __manager` (the same cluster/agent code and default config as norsk-manager) with a CPU profile over all runs of each client count.")
		if e.noEngine {
			fmt.Fprintln(w, "**It ran no placement engine (--no-placement-engine): the write path alone.**")
		}
		fmt.Fprintln(w)
		for _, n := range e.clients {
			printProfileTop(context.Background(), e, fmt.Sprintf("CPU profile of the manager, %d clients", n),
				filepath.Join(e.scratch, fmt.Sprintf("manager-cpu-%d.pprof", n)), "-top")
		}
	}
}

func printErrors(e *env, groups map[int][]runStats) {
	for _, n := range e.clients {
		for i, r := range groups[n] {
			if r.firstErr != nil {
				fmt.Fprintf(e.out, "\n%d clients, run %d: %d errors, first: %v\n", n, i+1, r.errs, r.firstErr)
			}
		}
	}
}

func printCreateJobTargets(e *env, mgr, raw map[int][]runStats) {
	w := e.out
	kind := "synced"
	if e.noSync {
		kind = "unsynced"
		fmt.Fprintln(w, "### Targets (medians over the runs; diagnostic run without fsync, so not the verdict)")
	} else {
		fmt.Fprintln(w, "### Targets (medians over the runs)")
	}
	fmt.Fprintln(w)
	if m, r := mgr[64], raw[64]; m != nil && r != nil {
		a, b := medianRate(m), medianRate(r)
		fmt.Fprintf(w, "- 64 clients: CreateJob %.0f/s ≥ raw badger single-key %s txns %.0f/s (%.2f×): %s\n",
			a, kind, b, a/b, met(a >= b))
	}
	if m := mgr[16]; m != nil {
		p := medianP99(m)
		fmt.Fprintf(w, "- 16 clients: CreateJob p99 %s ms < 20 ms: %s\n", fmtMs(ms(p)), met(p < 20*time.Millisecond))
	}
	fmt.Fprintln(w)
}

// printCPUPerWrite prints the manager's CPU time per CreateJob of every
// run (its CPU cores over the window divided by the rate), the figure
// issue 22 compares with etcd's CPU per Put.
func printCPUPerWrite(e *env, mgr map[int][]runStats) {
	w := e.out
	fmt.Fprintln(w, "| clients | manager CPU ms per CreateJob, per run (cores ÷ rate) |")
	fmt.Fprintln(w, "|---|---|")
	for _, n := range e.clients {
		var per []string
		for _, r := range mgr[n] {
			if r.rate > 0 {
				per = append(per, fmt.Sprintf("%.2f", 1000*r.serverCores/r.rate))
			}
		}
		fmt.Fprintf(w, "| %d | %s |\n", n, strings.Join(per, ", "))
	}
	fmt.Fprintln(w)
}
