// Package storecrash SIGKILLs a process writing to a manager store at
// random instants, many times, and checks that every restart opens the
// store the first time with every acknowledged write in it (issue 15 §2:
// a manager killed with SIGKILL could not start again). The process is
// crashwriter (this package's subdirectory): a single manager's FSM store
// with its LocalLog, or a cluster member's Raft log store, written under
// load. Run drives it; the test in this package runs a CI-sized round and
// "go run ./test/bench storecrash" a long one.
//
// Kill instants, chosen at random per iteration among Config.Kinds:
//
//   - delay: a random time after the start, so also during the store's
//     open (which replays and creates badger's logs);
//   - acks: after a random number of acknowledged writes;
//   - inject: at the entry of one system call on one store file, with
//     strace's fault injection (-P file -e inject=SYSCALL:signal=KILL): the
//     sizing (ftruncate) of the next write-ahead log, value log or table
//     right after badger created it, or the unlink of a write-ahead log
//     that was just truncated to zero after its flush; in a first start,
//     the rename that creates badger's MANIFEST or the data dir's marker.
//     These are the instants that left the zero-length log of the issue;
//     a random kill lands in them about once in tens of thousands.
//
// The first iteration kills the first start (delay: within 60 ms; inject:
// a first-start call), which initialises the data dir.
//
// After a kill that may have come before the process was ready (delay,
// inject), the next iteration is an acks one, so every kill is followed by
// a start that must open and verify the store. Zero-length logs found after
// a kill are counted (Result.EmptyLogs): they show that the crash windows
// were hit.
package storecrash

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// BuildWriter builds crashwriter into dir and returns its path. It runs
// "go build" in the module the source of this package belongs to.
func BuildWriter(ctx context.Context, dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("storecrash: cannot locate the package source")
	}
	out := filepath.Join(dir, "crashwriter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./crashwriter")
	cmd.Dir = filepath.Dir(file)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build crashwriter: %v\n%s", err, b)
	}
	return out, nil
}

// Store is the store crashwriter writes.
type Store string

const (
	// FSM is a single manager's store (persistence.Open, ModeSingle,
	// synced LocalLog appends) in a data dir.
	FSM Store = "fsm"
	// Raft is a cluster member's Raft log store (persistence.OpenRaftStore,
	// synced), the store of the failure.
	Raft Store = "raft"
)

// Kill kinds (see the package comment).
const (
	KindDelay  = "delay"
	KindAcks   = "acks"
	KindInject = "inject"
)

// Config configures Run.
type Config struct {
	// Writer is the crashwriter binary (BuildWriter).
	Writer string
	// Store selects the store.
	Store Store
	// Dir is the data dir (FSM) or Raft store dir (Raft); created by the
	// first run.
	Dir string
	// Iterations is the number of kills.
	Iterations int
	// Kinds are the kill kinds to choose from (default delay and acks;
	// inject needs strace on PATH).
	Kinds []string
	// MaxDelay bounds the delay kills (default 400ms) and MaxAcks the acks
	// kills (default 1500).
	MaxDelay time.Duration
	MaxAcks  int
	// Seed seeds the choice of kill instants; the same seed chooses the
	// same kinds and parameters (the instants themselves vary with the
	// machine).
	Seed uint64
	// Logf, if set, receives a line per iteration.
	Logf func(format string, args ...any)
}

// Result is what Run did.
type Result struct {
	// Kills counts the kills by kind, and Injected the inject kills by
	// instant ("sizing the write-ahead log the open creates", ...; "(no
	// call)" when the call did not come within 20 s and the process was
	// killed then).
	Kills    map[string]int
	Injected map[string]int
	// Restarts is the number of starts after a kill; each opened the store
	// and found every acknowledged write (Run fails otherwise).
	Restarts int
	// Acked is the number of acknowledged writes checked at the end (jobs
	// and the counter for FSM; retained log entries and the term for Raft).
	Acked int
	// EmptyLogs is the number of zero-length .mem/.vlog files found after
	// kills, and EmptyLogKills the number of kills that left one: how often
	// the crash windows were hit.
	EmptyLogs, EmptyLogKills int
	// TornLogKills is the number of kills that left a write-ahead or value
	// log whose last entry was only partly written (persistence.TornLogs:
	// the kill landed while badger copied an entry in). The start after
	// each such kill opened the store and found every acknowledged write,
	// like any other (a torn entry was never acknowledged).
	TornLogKills int
	// SlowestOpen is the longest time from a start to its "verified" line.
	SlowestOpen time.Duration
}

// ackState accumulates what the runs acknowledged.
type ackState struct {
	jobs                    []string
	seq, log, trimmed, term uint64
}

func (a *ackState) apply(line string) {
	f := strings.Fields(line)
	switch {
	case len(f) == 3 && f[0] == "ack" && f[1] == "job":
		a.jobs = append(a.jobs, f[2])
	case len(f) == 3 && f[0] == "ack":
		n, _ := strconv.ParseUint(f[2], 10, 64)
		switch f[1] {
		case "seq":
			a.seq = max(a.seq, n)
		case "log":
			a.log = max(a.log, n)
		case "term":
			a.term = max(a.term, n)
		}
	case len(f) == 2 && f[0] == "trim":
		n, _ := strconv.ParseUint(f[1], 10, 64)
		a.trimmed = max(a.trimmed, n)
	}
}

func (a *ackState) write(path string) error {
	var b bytes.Buffer
	for _, j := range a.jobs {
		fmt.Fprintf(&b, "job %s\n", j)
	}
	fmt.Fprintf(&b, "seq %d\nlog %d\ntrim %d\nterm %d\n", a.seq, a.log, a.trimmed, a.term)
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// count is the number of acknowledged writes a check covers.
func (a *ackState) count(store Store) int {
	if store == FSM {
		return len(a.jobs) + 1
	}
	n := 1
	if a.log > a.trimmed {
		n += int(a.log - a.trimmed)
	}
	return n
}

// Run runs cfg.Iterations kill-and-restart iterations and a final check.
// It returns an error, with the process's output, when a start fails to
// open the store or finds an acknowledged write missing.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 400 * time.Millisecond
	}
	if cfg.MaxAcks <= 0 {
		cfg.MaxAcks = 1500
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = []string{KindDelay, KindAcks}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	res := Result{Kills: map[string]int{}, Injected: map[string]int{}}
	var acked ackState
	ackedPath := cfg.Dir + ".acked"
	logDir := cfg.Dir
	if cfg.Store == FSM {
		logDir = filepath.Join(cfg.Dir, "store")
	}
	mustOpen := false // the previous kill was after a successful open
	for i := range cfg.Iterations {
		// The first iteration kills the very first start (the data dir's
		// initialisation) when the main kind can; otherwise the main kind
		// two times in three.
		kind := KindAcks
		switch {
		case i == 0 && cfg.Kinds[0] != KindAcks:
			kind = cfg.Kinds[0]
		case i == 0 || mustOpen:
		case rng.IntN(3) < 2 || len(cfg.Kinds) == 1:
			kind = cfg.Kinds[0]
		default:
			kind = cfg.Kinds[1+rng.IntN(len(cfg.Kinds)-1)]
		}
		if err := acked.write(ackedPath); err != nil {
			return res, err
		}
		it := iteration{cfg: cfg, kind: kind, n: i, logDir: logDir, ackedPath: ackedPath, acked: &acked, rng: rng}
		out, err := it.run(ctx)
		if err != nil {
			return res, err
		}
		res.Kills[kind]++
		if out.target != "" {
			res.Injected[out.target]++
		}
		if i > 0 {
			res.Restarts++
		}
		res.SlowestOpen = max(res.SlowestOpen, out.open)
		mustOpen = !out.ready
		empty := emptyLogs(logDir)
		if len(empty) > 0 {
			res.EmptyLogs += len(empty)
			res.EmptyLogKills++
		}
		torn, err := persistence.TornLogs(logDir)
		if err != nil {
			return res, fmt.Errorf("iteration %d: look for torn log entries: %w", i, err)
		}
		if len(torn) > 0 {
			res.TornLogKills++
		}
		cfg.Logf("iteration %d: %s kill%s, %d acknowledged so far; empty logs left: %v; logs with a torn last entry: %v",
			i, kind, out.note, acked.count(cfg.Store), empty, torn)
	}
	if err := acked.write(ackedPath); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, cfg.Writer, "--store", string(cfg.Store), "--dir", cfg.Dir, "--acked", ackedPath, "--check-only")
	if b, err := cmd.CombinedOutput(); err != nil {
		return res, fmt.Errorf("final check after %d kills: %v\n%s", cfg.Iterations, err, b)
	}
	res.Acked = acked.count(cfg.Store)
	return res, nil
}

// emptyLogs lists the zero-length .mem and .vlog files in dir.
func emptyLogs(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".mem") && !strings.HasSuffix(n, ".vlog") {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Size() == 0 {
			out = append(out, n)
		}
	}
	return out
}

// iteration is one start and kill.
type iteration struct {
	cfg       Config
	kind      string
	n         int
	logDir    string
	ackedPath string
	acked     *ackState
	rng       *rand.Rand
}

// outcome is what an iteration saw.
type outcome struct {
	ready  bool          // the process opened the store, verified it and wrote
	open   time.Duration // start → "verified"
	note   string        // the kill's parameters
	target string        // inject: the instant, in words
}

func (it *iteration) run(ctx context.Context) (outcome, error) {
	var out outcome
	args := []string{"--store", string(it.cfg.Store), "--dir", it.cfg.Dir, "--acked", it.ackedPath, "--run", fmt.Sprintf("r%d", it.n)}
	bin := it.cfg.Writer
	acksLeft, delay := -1, time.Duration(-1)
	// due is the fallback of an inject kill whose call does not come.
	var due <-chan time.Time
	switch it.kind {
	case KindDelay:
		maxDelay := it.cfg.MaxDelay
		if it.n == 0 {
			// Within the first start's initialisation.
			maxDelay = min(maxDelay, 60*time.Millisecond)
		}
		delay = time.Duration(it.rng.Int64N(int64(maxDelay)))
		out.note = fmt.Sprintf(" %s after start", delay.Round(time.Millisecond))
	case KindAcks:
		acksLeft = 1 + it.rng.IntN(it.cfg.MaxAcks)
		out.note = fmt.Sprintf(" after %d acks", acksLeft)
	case KindInject:
		call, path, label := it.injectTarget()
		out.target = label
		out.note = fmt.Sprintf(" at %s (%s %s)", label, call, filepath.Base(path))
		args = append([]string{"-f", "-qq", "-o", "/dev/null", "-e", "trace=" + call, "-P", path,
			"-e", "inject=" + call + ":signal=KILL:when=1", it.cfg.Writer}, args...)
		bin = "strace"
		due = time.After(20 * time.Second)
	default:
		return out, fmt.Errorf("unknown kill kind %q", it.kind)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return out, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return out, err
	}
	// pid is the writer's own process id, from its first line (under
	// strace cmd.Process is strace's; killing strace would detach the
	// writer and leave it running).
	var pid atomic.Int64
	kill := func() {
		if p := pid.Load(); p > 0 {
			_ = syscall.Kill(int(p), syscall.SIGKILL)
		}
	}
	if delay >= 0 {
		pid.Store(int64(cmd.Process.Pid))
		// The fault's instant, not a synchronisation: the kill lands
		// wherever the process is by then.
		defer time.AfterFunc(delay, kill).Stop()
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	ctxDone := ctx.Done()
	for {
		select {
		case <-ctxDone:
			kill()
			ctxDone = nil
		case line, ok := <-lines:
			if !ok {
				// EOF: the process exited (killed or not).
				err := cmd.Wait()
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				return it.finish(out, err, stderr.String())
			}
			var n int64
			switch {
			case strings.HasPrefix(line, "pid "):
				if _, err := fmt.Sscan(line[4:], &n); err == nil {
					pid.Store(n)
				}
			case strings.HasPrefix(line, "verified"):
				out.open = time.Since(start)
			case line == "ready":
				out.ready = true
			}
			it.acked.apply(line)
			if strings.HasPrefix(line, "ack ") && acksLeft > 0 {
				if acksLeft--; acksLeft == 0 {
					kill()
				}
			}
		case <-due:
			out.note += " (the call did not come within 20 s: killed then)"
			out.target = "(no call)"
			kill()
			due = nil
		}
	}
}

// injectTarget chooses the call and file an inject kill stops at, from
// what the store dir holds now (badger names its next write-ahead log
// after the newest one, +1, its next value log likewise, and the next
// table after the newest table), and labels the instant.
func (it *iteration) injectTarget() (call, path, label string) {
	if _, err := os.Stat(filepath.Join(it.logDir, "MANIFEST")); err != nil {
		// The first start: badger creating its MANIFEST (written aside,
		// then renamed), its first write-ahead log, the data dir's marker
		// (likewise).
		switch n := it.rng.IntN(3); {
		case n == 0:
			return "renameat", filepath.Join(it.logDir, "MANIFEST-REWRITE"), "first start: creating the MANIFEST"
		case n == 1 || it.cfg.Store != FSM:
			return "ftruncate", filepath.Join(it.logDir, "00001.mem"), "first start: sizing the first write-ahead log"
		}
		return "renameat", filepath.Join(it.cfg.Dir, "norsk-manager.json.tmp"), "first start: writing the marker"
	}
	mems, vlogs, ssts := fileIDs(it.logDir)
	nextMem, nextVlog, nextSST := maxID(mems)+1, maxID(vlogs)+1, maxID(ssts)+1
	mem := func(id uint64) string { return filepath.Join(it.logDir, fmt.Sprintf("%05d.mem", id)) }
	switch it.rng.IntN(6) {
	case 0, 1:
		return "ftruncate", mem(nextMem), "sizing the write-ahead log the open creates"
	case 2:
		return "ftruncate", mem(nextMem + 1), "sizing a write-ahead log a memtable rotation creates"
	case 3:
		return "ftruncate", filepath.Join(it.logDir, fmt.Sprintf("%06d.vlog", nextVlog)), "sizing the value log the open creates"
	case 4:
		// A log replayed at the open is flushed and deleted right after
		// it; without one, the log the open creates, after its rotation.
		target := nextMem
		if len(mems) > 0 {
			target = mems[0]
		}
		return "unlinkat", mem(target), "unlinking a flushed write-ahead log (truncated to zero)"
	}
	return "ftruncate", filepath.Join(it.logDir, fmt.Sprintf("%06d.sst", nextSST)), "sizing a new table"
}

// fileIDs returns the ids of the write-ahead logs, value logs and tables
// in dir, each sorted.
func fileIDs(dir string) (mems, vlogs, ssts []uint64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		ext := filepath.Ext(name)
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
		if err != nil {
			continue
		}
		switch ext {
		case ".mem":
			mems = append(mems, id)
		case ".vlog":
			vlogs = append(vlogs, id)
		case ".sst":
			ssts = append(ssts, id)
		}
	}
	for _, s := range [][]uint64{mems, vlogs, ssts} {
		slices.Sort(s)
	}
	return mems, vlogs, ssts
}

func maxID(ids []uint64) uint64 {
	if len(ids) == 0 {
		return 0
	}
	return ids[len(ids)-1]
}

// finish checks how the process ended. Everything it printed before the
// kill has been applied: those writes were acknowledged.
func (it *iteration) finish(out outcome, waitErr error, stderr string) (outcome, error) {
	var ee *exec.ExitError
	sigkilled := errors.As(waitErr, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	if !sigkilled {
		return out, fmt.Errorf("iteration %d (%s kill%s): the writer exited on its own (%v) before the kill; after %d kills it must open the store "+
			"the first time and keep writing:\n%s", it.n, it.kind, out.note, waitErr, it.n, stderr)
	}
	if it.kind == KindAcks && !out.ready {
		return out, fmt.Errorf("iteration %d: killed after acks without a ready line:\n%s", it.n, stderr)
	}
	return out, nil
}
