package gateway

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// A job's output fields (docs/design/jobs.md, "Output fields") are set by
// the manager, never taken from a client's CreateJob, UpdateJob or bundle
// template (issue 21 §11: a client-supplied terminal_state or state POST
// was stored on an active job):
//
//   - state: the job grain's state rule decides it; the client's is
//     ignored (as before).
//   - current_hash: the grain computes it; on UpdateJob it is the
//     optimistic-concurrency token the client must send back.
//   - terminal_state: the placement engine's verdict when it gives a job
//     up. A new job (CreateJob, a bundle's template) never has one: a
//     client's is dropped. On UpdateJob, absent clears the verdict (the
//     operator's way to let the engine place the job again) and the stored
//     one sent back as read keeps it; any other is InvalidArgument.

// clearJobOutputs drops the output fields of a new job definition j (a
// copy the caller owns).
func clearJobOutputs(j *managerpb.Job) {
	j.State, j.TerminalState = managerpb.Job_PRE, nil
}

// clearTemplateOutputs drops the output fields of every template job of
// bundle b (a copy the caller owns).
func clearTemplateOutputs(b *managerpb.Bundle) {
	for _, spec := range b.GetJobs() {
		if spec.GetJob() != nil {
			clearJobOutputs(spec.GetJob())
		}
	}
}

// checkUpdateTerminal refuses an UpdateJob of job id whose terminal_state
// is neither absent nor the stored one: InvalidArgument naming
// job.terminal_state; NotFound for an unknown job. The read races with
// nothing: a verdict written after it changes the job's hash, and the
// grain refuses the update as stale.
func (s *Server) checkUpdateTerminal(ctx context.Context, id string, j *managerpb.Job) error {
	if j.GetTerminalState() == nil {
		return nil
	}
	rec, err := s.readJob(ctx, id)
	if err != nil {
		return err
	}
	if stored := rec.GetJob().GetJob().GetTerminalState(); !proto.Equal(stored, j.GetTerminalState()) {
		if stored == nil {
			return invalid("job.terminal_state", "is output only: the placement engine sets it when it gives a job up, and job %q has none; leave it out", id)
		}
		return invalid("job.terminal_state", "is output only: send the stored one as read to keep it (%q), or leave it out to clear it and let the engine place the job again", stored.GetFailureReason())
	}
	return nil
}
