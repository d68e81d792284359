// Command crashwriter is the process test/storecrash SIGKILLs: it opens a
// manager store (--store fsm: the single manager's FSM store with its
// LocalLog, as norsk-manager opens it; --store raft: a cluster member's
// Raft log store), checks that every write an earlier run acknowledged is
// there, and then writes under load until it is killed, printing each
// acknowledgement on stdout only after the write returned (synced).
//
// Protocol (stdout, one line each):
//
//	pid <n>             the process id (first line, before the store is opened)
//	verified <n>        every acknowledged write listed in --acked is there (n of them)
//	ready               writing starts
//	ack job <id>        fsm: job <id> was created
//	ack seq <n>         fsm: the counter entity reached sequence n
//	ack log <index>     raft: the log holds every entry up to index
//	trim <index>        raft: entries up to index may be deleted from now on
//	ack term <n>        raft: the stable store holds CurrentTerm n
//
// Exit codes: 2 usage, 3 the store did not open (the failure under test),
// 4 an acknowledged write is missing or wrong, 5 a write failed. With
// --check-only it checks, closes the store and exits 0.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Exit codes (see the package comment).
const (
	exitUsage     = 2
	exitOpen      = 3
	exitLost      = 4
	exitWriteFail = 5
)

// counterKey is the fsm entity updated in sequence.
var counterKey = persistence.JobKey("counter")

func main() {
	var (
		store     = flag.String("store", "", "fsm or raft")
		dir       = flag.String("dir", "", "fsm: the data dir; raft: the raft store dir")
		acked     = flag.String("acked", "", "file of acknowledged writes to check (lines as the protocol's ack lines, without 'ack ')")
		run       = flag.String("run", "r0", "this run's name, part of the job ids it creates")
		writers   = flag.Int("writers", 4, "fsm: concurrent job creators")
		checkOnly = flag.Bool("check-only", false, "check, close and exit 0")
	)
	flag.Parse()
	if *dir == "" || (*store != "fsm" && *store != "raft") {
		fmt.Fprintln(os.Stderr, "crashwriter: --store fsm|raft and --dir are required")
		os.Exit(exitUsage)
	}
	want, err := readAcked(*acked)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashwriter:", err)
		os.Exit(exitUsage)
	}
	out := &acks{w: bufio.NewWriter(os.Stdout)}
	out.printf("pid %d", os.Getpid())
	switch *store {
	case "fsm":
		runFSM(*dir, want, out, *run, *writers, *checkOnly)
	case "raft":
		runRaft(*dir, want, out, *checkOnly)
	}
}

// acks prints protocol lines, each flushed before the next write starts.
type acks struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (a *acks) printf(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.w, format+"\n", args...)
	_ = a.w.Flush()
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crashwriter: "+format+"\n", args...)
	os.Exit(code)
}

// ackedSet is what earlier runs acknowledged.
type ackedSet struct {
	jobs    []string
	seq     uint64 // highest counter sequence
	log     uint64 // highest log index
	trimmed uint64 // highest index a trim may have deleted
	term    uint64
}

func readAcked(path string) (ackedSet, error) {
	var a ackedSet
	if path == "" {
		return a, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return a, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if f[0] == "job" {
			a.jobs = append(a.jobs, f[1])
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return a, fmt.Errorf("acked file %s: %q: %w", path, line, err)
		}
		switch f[0] {
		case "seq":
			a.seq = max(a.seq, n)
		case "log":
			a.log = max(a.log, n)
		case "trim":
			a.trimmed = max(a.trimmed, n)
		case "term":
			a.term = max(a.term, n)
		}
	}
	return a, nil
}

func runFSM(dir string, want ackedSet, out *acks, run string, writers int, checkOnly bool) {
	cfg := persistence.DefaultConfig(dir)
	cfg.Mode = persistence.ModeSingle
	// A small memtable (the smallest badger takes with its 1 MiB value
	// threshold) rotates, creating and deleting write-ahead logs, every
	// few thousand writes: the windows a SIGKILL must not break.
	cfg.MemTableSize, cfg.MaxBatchBytes, cfg.GCInterval = 8<<20, 1<<16, 0
	s, err := persistence.Open(cfg)
	if err != nil {
		fail(exitOpen, "open: %v", err)
	}
	l := persistence.NewLocalLog(s)
	ctx := context.Background()
	for _, id := range want.jobs {
		b, _, err := l.Load(ctx, persistence.JobKey(id))
		if err != nil {
			fail(exitLost, "acknowledged job %s: %v", id, err)
		}
		var rec internalpb.JobRecord
		if err := proto.Unmarshal(b, &rec); err != nil || rec.GetJob().GetJob().GetJobId().GetJobId() != id {
			fail(exitLost, "acknowledged job %s: wrong record (%v)", id, err)
		}
	}
	seq, err := l.LastSeq(ctx, counterKey)
	if err != nil || uint64(seq) < want.seq {
		fail(exitLost, "counter at sequence %d, %d was acknowledged (%v)", seq, want.seq, err)
	}
	out.printf("verified %d", len(want.jobs)+1)
	if checkOnly {
		l.Close()
		if err := s.Close(); err != nil {
			fail(exitWriteFail, "close: %v", err)
		}
		return
	}
	out.printf("ready")
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-%d-%d", run, w, i)
				if _, err := l.Append(ctx, persistence.JobKey(id), 0, persistence.Change{Record: jobRecord(id, rng), At: time.Now()}); err != nil {
					fail(exitWriteFail, "create %s: %v", id, err)
				}
				out.printf("ack job %s", id)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 99))
	for {
		res, err := l.Append(ctx, counterKey, seq, persistence.Change{Record: jobRecord("counter", rng), At: time.Now()})
		if err != nil {
			fail(exitWriteFail, "update the counter at %d: %v", seq, err)
		}
		seq = res.Seq
		out.printf("ack seq %d", seq)
	}
}

// jobRecord is a job record of about 2 KB (an incompressible tag).
func jobRecord(id string, rng *rand.Rand) []byte {
	pad := make([]byte, 2000)
	for i := range pad {
		pad[i] = byte('a' + rng.UintN(26))
	}
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"pad": string(pad)}}
	b, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: job}})
	if err != nil {
		panic(err)
	}
	return b
}

// logData is the content of raft entry index: derived from the index, so
// a check needs only the index.
func logData(index uint64) []byte {
	n := 1000 + int(index%7)*1000
	if index%4999 == 0 {
		n = 1_200_000 // over badger's value threshold: a value-log entry
	}
	unit := []byte(strconv.FormatUint(index, 36) + "|")
	return bytes.Repeat(unit, n/len(unit)+1)[:n]
}

func runRaft(dir string, want ackedSet, out *acks, checkOnly bool) {
	s, err := persistence.OpenRaftStore(persistence.DefaultRaftStoreConfig(dir))
	if err != nil {
		fail(exitOpen, "open: %v", err)
	}
	n := 0
	for i := want.trimmed + 1; i <= want.log; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			fail(exitLost, "acknowledged log %d (acknowledged up to %d, trimmed up to %d): %v", i, want.log, want.trimmed, err)
		}
		if l.Index != i || l.Term != i/100+1 || !bytes.Equal(l.Data, logData(i)) {
			fail(exitLost, "log %d holds index %d term %d and %d bytes of data, not what was written", i, l.Index, l.Term, len(l.Data))
		}
		n++
	}
	term, err := s.GetUint64([]byte("CurrentTerm"))
	if err != nil || term < want.term {
		fail(exitLost, "CurrentTerm %d, %d was acknowledged (%v)", term, want.term, err)
	}
	out.printf("verified %d", n+1)
	if checkOnly {
		if err := s.Close(); err != nil {
			fail(exitWriteFail, "close: %v", err)
		}
		return
	}
	last, err := s.LastIndex()
	if err != nil {
		fail(exitWriteFail, "last index: %v", err)
	}
	out.printf("ready")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for batch := 0; ; batch++ {
		logs := make([]*raft.Log, 1+rng.IntN(16))
		for i := range logs {
			idx := last + 1 + uint64(i)
			logs[i] = &raft.Log{Index: idx, Term: idx/100 + 1, Type: raft.LogCommand, Data: logData(idx), AppendedAt: time.Now()}
		}
		if err := s.StoreLogs(logs); err != nil {
			fail(exitWriteFail, "store logs %d-%d: %v", logs[0].Index, logs[len(logs)-1].Index, err)
		}
		last += uint64(len(logs))
		out.printf("ack log %d", last)
		if batch%40 == 39 {
			// Compaction as raft does it: the oldest entries go.
			first, err := s.FirstIndex()
			if err != nil {
				fail(exitWriteFail, "first index: %v", err)
			}
			if last > 2000 && first < last-2000 {
				out.printf("trim %d", last-2000)
				if err := s.DeleteRange(first, last-2000); err != nil {
					fail(exitWriteFail, "delete %d-%d: %v", first, last-2000, err)
				}
			}
			t := last/100 + 1
			if err := s.SetUint64([]byte("CurrentTerm"), t); err != nil {
				fail(exitWriteFail, "set CurrentTerm: %v", err)
			}
			out.printf("ack term %d", t)
		}
	}
}
