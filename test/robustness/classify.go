package robustness

import (
	"regexp"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// verdict is the classification of one (call, code) pair.
type verdict struct {
	outcome Outcome
	claim   Claim
}

// refusals lists, per call, the codes the manager documents as "nothing
// was done", with what each claims about the job. Every other code (but
// OK) is Unknown. Where each comes from:
//
//   - ALREADY_EXISTS (CreateJob): the job grain found a record
//     (actors/job create) before appending anything.
//   - NOT_FOUND: the grain has no record (update, delete) before
//     appending anything.
//   - FAILED_PRECONDITION (UpdateJob): current_hash is not the job's
//     current hash, checked before appending; the message names the
//     current one. (DeleteJob): the job has instances — none in this
//     workload, so the claim is only that the job exists.
//   - ABORTED: actors.Commit, the FSM refused the append because another
//     writer moved the sequence on (persistence ErrSeqConflict, checked
//     after the request-id dedup): the entry was applied as a no-op.
//   - INVALID_ARGUMENT, RESOURCE_EXHAUSTED: the gateway's validation, the
//     store's size limits: refused before anything is appended.
//
// UNAVAILABLE (no leader, "outcome unknown" of a Raft append, a manager
// shutting down or unreachable), DEADLINE_EXCEEDED (the caller's or the
// grain's deadline: the two cannot be told apart by code), CANCELED and
// anything else (INTERNAL, UNKNOWN, DATA_LOSS) are Unknown.
var refusals = map[OpKind]map[codes.Code]verdict{
	Create: {
		codes.AlreadyExists:     {Refused, ClaimExists},
		codes.Aborted:           {Refused, NoClaim},
		codes.InvalidArgument:   {Refused, NoClaim},
		codes.ResourceExhausted: {Refused, NoClaim},
	},
	Update: {
		codes.FailedPrecondition: {Refused, ClaimStaleHash},
		codes.NotFound:           {Refused, ClaimAbsent},
		codes.Aborted:            {Refused, NoClaim},
		codes.InvalidArgument:    {Refused, NoClaim},
		codes.ResourceExhausted:  {Refused, NoClaim},
	},
	Delete: {
		codes.NotFound:           {Refused, ClaimAbsent},
		codes.FailedPrecondition: {Refused, ClaimExists},
		codes.Aborted:            {Refused, NoClaim},
		codes.InvalidArgument:    {Refused, NoClaim},
	},
}

// namedHash finds the current hash in the message of a stale-hash
// refusal (actors/job update: "…, the job's current hash is N …"). This
// reads an error message, which code must never do to decide what to do;
// here it only strengthens what the model checks, and a message without
// it leaves the claim at "the hash differs".
var namedHash = regexp.MustCompile(`current hash is (-?[0-9]+)`)

// Classify turns the error of a write (nil: success) into an Output
// (without the success's hash, which the caller sets). A read is
// classified by ClassifyRead.
func Classify(kind OpKind, err error) Output {
	if err == nil {
		return Output{Outcome: OK, Code: codes.OK}
	}
	st := status.Convert(err)
	out := Output{Outcome: Unknown, Code: st.Code(), Message: st.Message()}
	if v, ok := refusals[kind][st.Code()]; ok {
		out.Outcome, out.Claim = v.outcome, v.claim
	}
	if out.Claim == ClaimStaleHash {
		if m := namedHash.FindStringSubmatch(st.Message()); m != nil {
			if h, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				out.Hash = h
			}
		}
	}
	return out
}

// ClassifyRead classifies a JobById error: NOT_FOUND observed the job's
// absence (Outcome OK, Found false); any other error observed nothing
// (Unknown: such reads are left out of the history).
func ClassifyRead(err error) Output {
	if err == nil {
		return Output{Outcome: OK, Code: codes.OK, Found: true}
	}
	st := status.Convert(err)
	if st.Code() == codes.NotFound {
		return Output{Outcome: OK, Code: codes.NotFound}
	}
	return Output{Outcome: Unknown, Code: st.Code(), Message: st.Message()}
}
