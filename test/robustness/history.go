package robustness

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded call.
type Op struct {
	// Client is the recording client's number (workload clients first,
	// then the recovery probes and the final reads).
	Client int
	// Manager is the name of the manager the call went to.
	Manager string
	Input   Input
	Output  Output
	// Call and Return are the invocation and response times since the
	// recorder started. An Unknown write's Return is when the client gave
	// up; the checker treats it as unbounded (History).
	Call, Return time.Duration
}

// Fault is a nemesis action as recorded: what, to whom, from Start until
// End (the heal).
type Fault struct {
	Desc       string
	Start, End time.Duration
}

// Recorder collects a run's operations and faults. Safe for concurrent
// use.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	ops    []Op    // guarded by mu
	faults []Fault // guarded by mu
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the time since the recorder started (monotonic).
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Add records op. Reads that observed nothing (Unknown) are left out:
// they change nothing and claim nothing.
func (r *Recorder) Add(op Op) {
	if op.Input.Kind == Read && op.Output.Outcome == Unknown {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

// AddFault records a nemesis action.
func (r *Recorder) AddFault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

// Ops returns a copy of the recorded operations, in recording order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Faults returns a copy of the recorded faults.
func (r *Recorder) Faults() []Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Fault(nil), r.faults...)
}

// HistoryStats counts what History did with Unknown writes.
type HistoryStats struct {
	// Unknown is the number of Unknown writes.
	Unknown int
	// Dropped: Unknown updates whose write nobody observed, left out.
	Dropped int
	// Bounded: Unknown writes whose write a later answer observed, given
	// that answer's return time.
	Bounded int
}

// History turns recorded operations into porcupine operations. An Unknown
// write gets an unbounded return time (it may take effect at any moment
// after its call, or never), except where the history allows less
// without changing the verdict (etcd's robustness suite patches its
// histories the same way):
//
//   - A write is observed when an operation needs the job to have the
//     write's hash at its linearization point: a read answering it, a
//     successful update from it, a stale-hash refusal naming it. Every
//     write has its own hash (its payload is unique), so an observed
//     write must be linearized before the earliest return of its
//     observers: that becomes its return time.
//   - An Unknown update nobody observed is dropped: its only effect on
//     others would be a hash nobody saw, which could explain nothing
//     (provided every stale-hash refusal of that job named the current
//     hash; otherwise none of that job's updates is dropped).
//
// Unknown creates and deletes nobody observed keep the unbounded return
// (an ALREADY_EXISTS or NOT_FOUND may need them).
//
// Each Unknown write is drawn on a lane of its own in the visualisation
// (its interval would overlap its client's later calls).
func History(ops []Op) ([]porcupine.Operation, HistoryStats) {
	var maxReturn time.Duration
	firstSeen := map[hashKey]time.Duration{} // hash → earliest return of an observer
	unnamedRefusal := map[string]bool{}      // keys with a stale-hash refusal that named no hash
	maxClient := 0
	for _, op := range ops {
		maxReturn = max(maxReturn, op.Return)
		maxClient = max(maxClient, op.Client)
		for _, h := range observedHashes(op) {
			k := hashKey{op.Input.Key, h}
			if t, ok := firstSeen[k]; !ok || op.Return < t {
				firstSeen[k] = op.Return
			}
		}
		if op.Output.Outcome == Refused && op.Output.Claim == ClaimStaleHash && op.Output.Hash == 0 {
			unnamedRefusal[op.Input.Key] = true
		}
	}
	infinity := int64(maxReturn) + 1
	if infinity < 0 || infinity == math.MaxInt64 {
		infinity = math.MaxInt64 - 1
	}
	var st HistoryStats
	out := make([]porcupine.Operation, 0, len(ops))
	lane := maxClient + 1
	for _, op := range ops {
		p := porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output,
			Call: int64(op.Call), Return: int64(op.Return), Metadata: op.Manager}
		if op.Output.Outcome == Unknown && op.Input.Kind != Read {
			st.Unknown++
			seen, observed := firstSeen[hashKey{op.Input.Key, op.Input.NewHash}]
			switch {
			case op.Input.Kind != Delete && observed && seen >= op.Call:
				st.Bounded++
				p.Return = int64(seen)
			case op.Input.Kind == Update && !observed && !unnamedRefusal[op.Input.Key]:
				st.Dropped++
				continue
			default:
				p.Return = infinity
			}
			p.ClientId = lane
			p.Metadata = fmt.Sprintf("%s (client %d, gave up after %s)", op.Manager, op.Client, (op.Return - op.Call).Round(time.Millisecond))
			lane++
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out, st
}

type hashKey struct {
	key  string
	hash int64
}

// observedHashes lists the hashes the job must have had at op's
// linearization point, if op is linearizable at all.
func observedHashes(op Op) []int64 {
	in, out := op.Input, op.Output
	switch {
	case out.Outcome == OK && in.Kind == Read && out.Found:
		return []int64{out.Hash}
	case out.Outcome == OK && in.Kind == Update:
		return []int64{in.FromHash}
	case out.Outcome == Refused && out.Claim == ClaimStaleHash && out.Hash != 0:
		return []int64{out.Hash}
	}
	return nil
}
