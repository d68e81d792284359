package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// ForwardFunc returns the internal Cluster client of the manager named
// name (the leader), or an error if its address is unknown.
type ForwardFunc func(ctx context.Context, name string) (internalpb.ClusterClient, error)

// Journal returns the persistence.Journal of this manager: appends go
// through Raft, loads read the local FSM after a Barrier.
func (r *Replicator) Journal() persistence.Journal { return (*raftJournal)(r) }

type raftJournal Replicator

var _ persistence.Journal = (*raftJournal)(nil)

// Append implements persistence.Journal: committed by a quorum and applied
// on this manager before it returns. The leader refuses it, with nothing
// appended, while its data dir is under the free-space reserve (a
// *persistence.NoSpaceError naming the leader). After an error other than
// a conflict, ErrTooLarge or ErrNoSpace the outcome is unknown (as with any
// consensus write).
func (j *raftJournal) Append(ctx context.Context, key persistence.EntityKey, expectedSeq persistence.Seq, change persistence.Change) (persistence.AppendResult, error) {
	r := (*Replicator)(j)
	cmd := &internalpb.AppendCommand{
		EntityKey:   string(key),
		ExpectedSeq: uint64(expectedSeq),
		RequestId:   change.RequestID,
		Record:      change.Record,
		Delete:      change.Delete,
		Events:      change.Events,
		At:          timestamppb.New(change.At),
		Audit:       change.Audit,
	}
	for {
		if r.IsLeader() {
			res, _, err := r.applyLocal(cmd)
			if errors.Is(err, raft.ErrNotLeader) {
				continue // lost leadership before the entry was accepted: forward
			}
			return res, err
		}
		leader := r.Leader()
		if leader == "" {
			if err := r.WaitForLeader(ctx); err != nil {
				return persistence.AppendResult{}, err
			}
			continue
		}
		res, err := r.forward(ctx, leader, cmd)
		var nl *notLeaderError
		if errors.As(err, &nl) {
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return persistence.AppendResult{}, err
			}
			continue // leadership moved while we forwarded; nothing was applied
		}
		return res, err
	}
}

// applyLocal applies cmd through raft on the leader and returns its result
// and Raft index.
func (r *Replicator) applyLocal(cmd *internalpb.AppendCommand) (persistence.AppendResult, uint64, error) {
	data, err := persistence.EncodeAppend(cmd)
	if err != nil {
		return persistence.AppendResult{}, 0, err
	}
	// Refused before Raft sees it, so nothing is appended anywhere: the
	// leader's data dir is under its reserve.
	if err := r.admitSpace(len(data)); err != nil {
		return persistence.AppendResult{}, 0, err
	}
	f := r.raft.Apply(data, r.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return persistence.AppendResult{}, 0, err
		}
		// ErrLeadershipLost and the like: the entry may or may not commit.
		return persistence.AppendResult{}, 0, fmt.Errorf("replication: append to %s: outcome unknown: %w", cmd.GetEntityKey(), err)
	}
	resp, ok := f.Response().(*persistence.RaftApplyResponse)
	if !ok || len(resp.Results) != 1 {
		return persistence.AppendResult{}, 0, fmt.Errorf("replication: append to %s: unexpected apply response %T", cmd.GetEntityKey(), f.Response())
	}
	out := resp.Results[0]
	return out.Result, f.Index(), out.Err
}

// notLeaderError: the manager we forwarded to is not the leader.
type notLeaderError struct{ msg string }

func (e *notLeaderError) Error() string { return e.msg }

// forward sends cmd to the leader and waits until this manager's FSM has
// applied the entry.
func (r *Replicator) forward(ctx context.Context, leader string, cmd *internalpb.AppendCommand) (persistence.AppendResult, error) {
	cl, err := r.cfg.Forward(ctx, leader)
	if err != nil {
		return persistence.AppendResult{}, fmt.Errorf("replication: reach leader %s: %w", leader, err)
	}
	reply, err := cl.Append(ctx, cmd)
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			return persistence.AppendResult{}, &notLeaderError{msg: status.Convert(err).Message()}
		}
		if ns := noSpaceFromStatus(err); ns != nil {
			return persistence.AppendResult{}, ns // refused before Raft: nothing was appended
		}
		return persistence.AppendResult{}, fmt.Errorf("replication: append via leader %s: outcome unknown: %w", leader, err)
	}
	if err := r.waitApplied(ctx, reply.GetRaftIndex()); err != nil {
		return persistence.AppendResult{}, err
	}
	return appendResultOf(cmd, reply)
}

// appendResultOf turns an AppendReply into the journal's result or error.
func appendResultOf(cmd *internalpb.AppendCommand, reply *internalpb.AppendReply) (persistence.AppendResult, error) {
	res := persistence.AppendResult{Seq: persistence.Seq(reply.GetSeq()), LastEvent: persistence.Index(reply.GetLastEvent()), Duplicate: reply.GetDuplicate()}
	switch reply.GetCode() {
	case errorpb.Code_OK:
		return res, nil
	case errorpb.Code_ABORTED:
		return res, &persistence.ConflictError{Key: persistence.EntityKey(cmd.GetEntityKey()),
			Expected: persistence.Seq(reply.GetExpectedSeq()), Actual: persistence.Seq(reply.GetActualSeq())}
	case errorpb.Code_RESOURCE_EXHAUSTED:
		return res, fmt.Errorf("%s: %w", reply.GetMessage(), persistence.ErrTooLarge)
	}
	return res, fmt.Errorf("replication: append to %s: %s", cmd.GetEntityKey(), reply.GetMessage())
}

// waitApplied blocks until the local FSM has applied index, woken by each
// apply (FSM.AppliedChanged), not polling.
func (r *Replicator) waitApplied(ctx context.Context, index uint64) error {
	for {
		applied, changed := r.cfg.Store.FSM().AppliedChanged()
		if applied >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("replication: wait for index %d (applied %d): %w", index, r.AppliedIndex(), ctx.Err())
		case <-r.stopCh:
			return fmt.Errorf("replication: wait for index %d (applied %d): %w", index, r.AppliedIndex(), raft.ErrRaftShutdown)
		}
	}
}

// Load implements persistence.Journal: the entity as of every write
// acknowledged before the call.
func (j *raftJournal) Load(ctx context.Context, key persistence.EntityKey) ([]byte, persistence.Seq, error) {
	r := (*Replicator)(j)
	if err := r.Barrier(ctx); err != nil {
		return nil, 0, err
	}
	return r.cfg.Store.Load(key)
}

// LastSeq implements persistence.Journal: the entity's sequence as of
// every write acknowledged before the call (after a Barrier).
func (j *raftJournal) LastSeq(ctx context.Context, key persistence.EntityKey) (persistence.Seq, error) {
	r := (*Replicator)(j)
	if err := r.Barrier(ctx); err != nil {
		return 0, err
	}
	return r.cfg.Store.Seq(key)
}

// Barrier waits until the local FSM has applied every entry committed
// before the call (read index): on the leader after confirming leadership
// with a quorum, on a follower by asking the leader for its commit index.
// ErrNoLeader (wrapped) when no leader answers before ctx ends.
func (r *Replicator) Barrier(ctx context.Context) error {
	for {
		idx, err := r.readIndex(ctx)
		if err == nil {
			return r.waitApplied(ctx, idx)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
	}
}

// readIndex returns the leader's commit index, confirmed by a quorum.
func (r *Replicator) readIndex(ctx context.Context) (uint64, error) {
	if r.IsLeader() {
		return r.LocalReadIndex(ctx)
	}
	leader := r.Leader()
	if leader == "" {
		return 0, ErrNoLeader
	}
	// Abandoned when this manager learns of another leader (or of none):
	// a frozen leader never answers, and Barrier asks the next one.
	lctx, cancel := whileLeader(ctx, leader, r.Leader, leaderPoll)
	defer cancel()
	cl, err := r.cfg.Forward(lctx, leader)
	if err != nil {
		return 0, err
	}
	reply, err := cl.ReadIndex(lctx, &internalpb.ReadIndexRequest{})
	if err != nil {
		if cause := context.Cause(lctx); errors.Is(cause, errLeaderChanged) {
			return 0, fmt.Errorf("replication: read index from %s abandoned: %w", leader, cause)
		}
		return 0, err
	}
	return reply.GetCommitIndex(), nil
}

// LocalReadIndex is the read index on the leader: the index of the last
// entry its FSM applied. Every write acknowledged so far was applied on the
// leader before it was acknowledged, and after the barrier of its election
// the leader has applied everything committed before its term; a quorum
// confirms it still leads. (Not raft's commit index: noop and barrier
// entries never reach the FSM, so a follower could wait for it forever.)
// An error if this manager is not a ready leader, is shutting down, or ctx
// ends before a quorum confirmed the leadership.
func (r *Replicator) LocalReadIndex(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	ready, term := r.leaderReady, r.leaderTerm
	r.mu.Unlock()
	if !ready || r.raft.CurrentTerm() != term {
		return 0, &notLeaderError{msg: "not a ready leader"}
	}
	idx := r.AppliedIndex()
	if err := r.verifyLeader(ctx); err != nil {
		return 0, &notLeaderError{msg: err.Error()}
	}
	return idx, nil
}

// verifyLeader confirms with a quorum that this node still leads. raft's
// VerifyLeader future can stay unanswered forever when raft shuts down
// with the request queued, so the wait is bounded by ctx and Shutdown.
func (r *Replicator) verifyLeader(ctx context.Context) error {
	f := r.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopCh:
		return raft.ErrRaftShutdown
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
