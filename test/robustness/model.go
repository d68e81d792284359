package robustness

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
)

// OpKind is the API call an operation made.
type OpKind uint8

// The calls of the workload.
const (
	// Read is JobById.
	Read OpKind = iota + 1
	// Create is CreateJob.
	Create
	// Update is UpdateJob with current_hash: a compare-and-set.
	Update
	// Delete is DeleteJob.
	Delete
)

// String names the kind (read, create, update, delete).
func (k OpKind) String() string {
	switch k {
	case Read:
		return "read"
	case Create:
		return "create"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Outcome is how an answer is classified (docs/design/ha.md, "Robustness
// suite").
type Outcome uint8

// Outcomes.
const (
	// OK: the call was done (a read: it observed the job or its absence).
	OK Outcome = iota + 1
	// Refused: the manager guarantees nothing was done; the refusal may
	// claim something about the job's state (Claim), which the model
	// checks.
	Refused
	// Unknown: the call may or may not have taken effect, at any time
	// after it was made (Unavailable, DeadlineExceeded, Canceled, …).
	Unknown
)

// String names the outcome (ok, refused, unknown).
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Claim is what a refusal says about the job's state at the moment it
// was refused.
type Claim uint8

// Claims.
const (
	// NoClaim: nothing (ABORTED: another writer got there first).
	NoClaim Claim = iota
	// ClaimExists: the job exists (ALREADY_EXISTS; FAILED_PRECONDITION of
	// a delete: it has instances).
	ClaimExists
	// ClaimAbsent: the job does not exist (NOT_FOUND).
	ClaimAbsent
	// ClaimStaleHash: the job exists and its current hash differs from the
	// current_hash sent (FAILED_PRECONDITION of an update); if the
	// refusal names the current hash (Output.Hash), it is that one.
	ClaimStaleHash
)

// Input is what a client asked for, on one job.
type Input struct {
	Kind OpKind
	// Key is the job id.
	Key string
	// FromHash is the current_hash an Update sent.
	FromHash int64
	// Payload is the unique write id a Create or Update put in the job's
	// description, so that a read tells which write it sees.
	Payload string
	// NewHash is the hash the written definition has (job.Hash): what
	// a Create or Update must answer, and the job's hash after it.
	NewHash int64
}

// Output is the classified answer.
type Output struct {
	Outcome Outcome
	// Code is the gRPC code answered (codes.OK for a success).
	Code codes.Code
	// Claim is what a refusal says about the job.
	Claim Claim
	// Found: a read found the job (false: NOT_FOUND).
	Found bool
	// Hash is a read's current_hash, the hash a Create or Update
	// answered, or the current hash a stale-hash refusal names (0 if it
	// names none).
	Hash int64
	// Payload is a read's description.
	Payload string
	// Message is the manager's error message (for reports only).
	Message string
}

// State is the model of one job: whether it exists, its current hash and
// the write id of the write that produced it.
type State struct {
	Exists  bool
	Hash    int64
	Payload string
}

// String is "absent" or the payload with the hash's low 32 bits.
func (s State) String() string {
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("%s #%s", s.Payload, shortHash(s.Hash))
}

// shortHash prints the low 32 bits of a job hash: enough to tell a run's
// hashes apart in a report.
func shortHash(h int64) string { return fmt.Sprintf("%08x", uint32(h)) }

// Step applies one operation to the state of its job: whether the answer
// is possible in state s, and the state after it. An Unknown operation is
// an attempt: it takes effect if its precondition holds where it is
// linearized, and is a no-op otherwise; not taking effect at all is the
// same as being linearized after every other operation, which its
// unbounded return time allows.
func Step(s State, in Input, out Output) (bool, State) {
	switch out.Outcome {
	case Unknown:
		return true, attempt(s, in)
	case Refused:
		return claimHolds(s, in, out), s
	}
	switch in.Kind {
	case Read:
		if !out.Found {
			return !s.Exists, s
		}
		return s.Exists && s.Hash == out.Hash && s.Payload == out.Payload, s
	case Create:
		return !s.Exists && out.Hash == in.NewHash, written(in)
	case Update:
		return s.Exists && s.Hash == in.FromHash && out.Hash == in.NewHash, written(in)
	case Delete:
		return s.Exists, State{}
	}
	return false, s
}

func written(in Input) State { return State{Exists: true, Hash: in.NewHash, Payload: in.Payload} }

// attempt is the effect of in if it is carried out in state s.
func attempt(s State, in Input) State {
	switch {
	case in.Kind == Create && !s.Exists:
		return written(in)
	case in.Kind == Update && s.Exists && s.Hash == in.FromHash:
		return written(in)
	case in.Kind == Delete && s.Exists:
		return State{}
	}
	return s
}

// claimHolds reports whether a refusal's claim is true in state s.
func claimHolds(s State, in Input, out Output) bool {
	switch out.Claim {
	case ClaimExists:
		return s.Exists
	case ClaimAbsent:
		return !s.Exists
	case ClaimStaleHash:
		return s.Exists && s.Hash != in.FromHash && (out.Hash == 0 || out.Hash == s.Hash)
	}
	return true
}

// Model is the porcupine model of a set of jobs: partitioned by job id
// (jobs are independent), each job absent at the start.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() any { return State{} },
		Step: func(state, input, output any) (bool, any) {
			return Step(state.(State), input.(Input), output.(Output))
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		Hash: func(state any) uint64 {
			s := state.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%t/%d/%s", s.Exists, s.Hash, s.Payload)
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string { return describe(input.(Input), output.(Output)) },
		DescribeState:     func(state any) string { return state.(State).String() },
		DescribeOperationMetadata: func(info any) string {
			if s, ok := info.(string); ok {
				return s
			}
			return ""
		},
	}
}

// partitionByKey splits a history by job id, in job-id order (so that the
// partitions of a LinearizationInfo can be named: see Keys).
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(Input).Key
		by[k] = append(by[k], op)
	}
	keys := Keys(history)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = by[k]
	}
	return out
}

// Keys returns the job ids of a history in the order the model's
// partitions have.
func Keys(history []porcupine.Operation) []string {
	seen := map[string]bool{}
	var keys []string
	for _, op := range history {
		if k := op.Input.(Input).Key; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// describe is one line per operation, as the visualisation and the
// failure summary print it.
func describe(in Input, out Output) string {
	var call string
	switch in.Kind {
	case Read:
		call = "read()"
	case Create:
		call = fmt.Sprintf("create(%s #%s)", in.Payload, shortHash(in.NewHash))
	case Update:
		call = fmt.Sprintf("update(#%s → %s #%s)", shortHash(in.FromHash), in.Payload, shortHash(in.NewHash))
	case Delete:
		call = "delete()"
	}
	switch {
	case out.Outcome == Unknown:
		return fmt.Sprintf("%s → unknown (%s)", call, out.Code)
	case out.Outcome == Refused && out.Claim == ClaimStaleHash && out.Hash != 0:
		return fmt.Sprintf("%s → %s: current is #%s", call, out.Code, shortHash(out.Hash))
	case out.Outcome == Refused:
		return fmt.Sprintf("%s → %s", call, out.Code)
	case in.Kind == Read && !out.Found:
		return call + " → NotFound"
	case in.Kind == Read:
		return fmt.Sprintf("%s → %s #%s", call, out.Payload, shortHash(out.Hash))
	case in.Kind == Delete:
		return call + " → ok"
	}
	return fmt.Sprintf("%s → ok #%s", call, shortHash(out.Hash))
}
