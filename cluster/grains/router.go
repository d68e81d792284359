// Package grains routes grain commands across the managers of an HA
// cluster: Router implements actors.Router over protoactor's cluster
// (disthash placement over the memberlist membership), so grains run on
// whichever manager owns their identity and callers need not know which.
package grains

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Config configures a Router.
type Config struct {
	// RequestTimeout bounds Request when its context has no earlier
	// deadline, each delivery attempt of a report sent with Send, and the
	// delivery of any other one-way command. Default 10 s.
	RequestTimeout time.Duration
	// SendTimeout bounds the retries of one report sent with Send, across
	// delivery attempts (see Send). Default 10 min: longer than a leader
	// election and a grain's move by far, so that a report is not lost to
	// a failover; a grain still unreachable after it is logged and
	// dropped.
	SendTimeout time.Duration
	// SendBackoff is the first wait between delivery attempts of a
	// report; it doubles per attempt up to 2 s. Default 50 ms.
	SendBackoff time.Duration
	Logger      *slog.Logger
}

// maxSendBackoff caps the wait between delivery attempts of one Send.
const maxSendBackoff = 2 * time.Second

// Router implements actors.Router over a protoactor cluster. Cluster
// requests are at-least-once (the lookup retries after timeouts and dead
// letters), which is safe because every grain command carries a request id.
type Router struct {
	c   *cluster.Cluster
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Stop: ends pending Sends
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	queues map[string]*sendQueue // kind/identity → pending one-way commands; guarded by mu
}

var _ actors.Router = (*Router)(nil)

// sendQueue holds one grain's pending one-way commands, delivered in order
// by one goroutine.
type sendQueue struct{ items []proto.Message }

// NewRouter returns a router over c (a started cluster member).
func NewRouter(c *cluster.Cluster, cfg Config) *Router {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 10 * time.Minute
	}
	if cfg.SendBackoff <= 0 {
		cfg.SendBackoff = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Router{c: c, cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, queues: map[string]*sendQueue{}}
}

// Request implements actors.Router: it retries while the grain is being
// moved or re-activated (timeouts and dead letters) until ctx's deadline
// (or RequestTimeout). A JobCommand, NodeCommand or BundleCommand carries
// that deadline (in a copy of cmd): a grain that dequeues it later does
// nothing, so that a request that failed here never takes effect
// afterwards.
func (r *Router) Request(ctx context.Context, kind, identity string, cmd proto.Message) (*internalpb.Reply, error) {
	deadline := r.deadline(ctx)
	return r.request(ctx, deadline, kind, identity, withDeadline(cmd, deadline))
}

// deadline is ctx's deadline, at most RequestTimeout from now.
func (r *Router) deadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(r.cfg.RequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// withDeadline returns a copy of a job, node or bundle command carrying
// deadline, unless it has one already; other messages unchanged.
func withDeadline(cmd proto.Message, deadline time.Time) proto.Message {
	switch c := cmd.(type) {
	case *internalpb.JobCommand:
		if c.GetDeadline() == nil {
			c = proto.Clone(c).(*internalpb.JobCommand)
			c.Deadline = timestamppb.New(deadline)
			return c
		}
	case *internalpb.NodeCommand:
		if c.GetDeadline() == nil {
			c = proto.Clone(c).(*internalpb.NodeCommand)
			c.Deadline = timestamppb.New(deadline)
			return c
		}
	case *internalpb.BundleCommand:
		if c.GetDeadline() == nil {
			c = proto.Clone(c).(*internalpb.BundleCommand)
			c.Deadline = timestamppb.New(deadline)
			return c
		}
	}
	return cmd
}

// request delivers cmd as it is, retrying until deadline.
func (r *Router) request(ctx context.Context, deadline time.Time, kind, identity string, cmd proto.Message) (*internalpb.Reply, error) {
	for {
		left := time.Until(deadline)
		if left <= 0 || r.ctx.Err() != nil {
			// Out of time, or this router was stopped (the manager is
			// stopping or rejoining the actor cluster: Switch retries).
			return nil, actors.ErrGrainTimeout
		}
		res, err := r.call(ctx, identity, kind, cmd, left)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		reply, rerr := actors.FutureReply(res, err)
		if rerr == nil {
			return reply, nil
		}
		if _, dead := res.(*actor.DeadLetterResponse); dead || errors.Is(rerr, actors.ErrGrainTimeout) || res == nil {
			// The grain moved or stopped under us: look it up again.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		return nil, rerr
	}
}

// call makes one cluster request, abandoned early when ctx ends or the
// router stops (protoactor's Request waits out its timeout even when the
// actor system under it is shut down, which a rejoin does).
func (r *Router) call(ctx context.Context, identity, kind string, cmd proto.Message, timeout time.Duration) (any, error) {
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() { // ends within timeout
		res, err := r.c.Request(identity, kind, cmd, cluster.WithTimeout(timeout))
		done <- result{res, err}
	}()
	select {
	case out := <-done:
		return out.res, out.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.ctx.Done():
		return nil, actors.ErrGrainTimeout
	}
}

// RequestFuture implements actors.Router: the request runs on its own
// goroutine and completes the returned future.
func (r *Router) RequestFuture(kind, identity string, cmd proto.Message, timeout time.Duration) *actor.Future {
	system := r.c.ActorSystem
	f := actor.NewFuture(system, timeout)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, timeout)
		defer cancel()
		reply, err := r.Request(ctx, kind, identity, cmd)
		if err != nil {
			system.Root.Send(f.PID(), &actor.DeadLetterResponse{})
			return
		}
		system.Root.Send(f.PID(), reply)
	}()
	return f
}

// Send implements actors.Router: commands to one grain are delivered in
// the order they were sent. A worker's instance report to a job grain
// (job_started, job_stopped, job_failed, missing: see isReport) is
// retried until the grain
// carries it out or SendTimeout passes (then logged and dropped: the next
// worker hello re-derives it). A delivery counts as failed, and is retried
// with backoff, when the grain did not answer within RequestTimeout (it is
// moving to another manager, or its manager is gone), or answered
// UNAVAILABLE or ABORTED (it could not confirm its record is current or
// could not persist the change: no Raft leader during a failover). A
// repeat is safe: reports are idempotent on the record, and one from a
// superseded worker session is ignored by the job grain. Any other answer
// is the grain's decision and ends it.
//
// Every other one-way command (NodeGone, a stop or orphan to a node
// grain, a command with a deadline) is retried only while the grain does not
// answer, within one RequestTimeout: a stop_job reaching the worker
// minutes late would stop whatever runs for (job, role) then, perhaps an
// instance started since; the node grain's stop re-send (level-triggered
// from the records) delivers the stops that are still wanted.
func (r *Router) Send(kind, identity string, cmd proto.Message) {
	key := kind + "/" + identity
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return // stopped: grains stopping at shutdown send nothing
	}
	if q, ok := r.queues[key]; ok {
		q.items = append(q.items, cmd)
		return
	}
	q := &sendQueue{items: []proto.Message{cmd}}
	r.queues[key] = q
	r.wg.Add(1)
	go r.drain(key, kind, identity, q)
}

func (r *Router) drain(key, kind, identity string, q *sendQueue) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(q.items) == 0 {
			delete(r.queues, key)
			r.mu.Unlock()
			return
		}
		cmd := q.items[0]
		q.items = q.items[1:]
		r.mu.Unlock()
		err := r.deliver(kind, identity, cmd)
		if err != nil && r.ctx.Err() == nil {
			r.log.Warn("one-way grain command dropped", "kind", kind, "identity", identity, "error", err)
		}
	}
}

// deliver delivers one one-way command (see Send): a report is attempted
// until the grain carries it out, SendTimeout passes or the router stops;
// anything else within one RequestTimeout. The error says why it gave up.
func (r *Router) deliver(kind, identity string, cmd proto.Message) error {
	if !isReport(cmd) {
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
		defer cancel()
		_, err := r.request(ctx, r.deadline(ctx), kind, identity, cmd)
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.SendTimeout)
	defer cancel()
	backoff := r.cfg.SendBackoff
	for attempt := 1; ; attempt++ {
		// A report carries no deadline: what it says stays true however
		// late its grain handles it, so each attempt is bounded here only.
		reply, err := r.request(ctx, r.deadline(ctx), kind, identity, cmd)
		if ctx.Err() != nil {
			return fmt.Errorf("not carried out in %s (%d attempts): %w", r.cfg.SendTimeout, attempt, ctx.Err())
		}
		if err == nil && !retryableReply(reply) {
			if attempt > 1 {
				r.log.Info("one-way grain command delivered after retries", "kind", kind, "identity", identity, "attempts", attempt)
			}
			return nil
		}
		if err == nil {
			err = fmt.Errorf("grain answered %s: %s", reply.GetCode(), reply.GetMessage())
		} else if !errors.Is(err, actors.ErrGrainTimeout) {
			return err // not a grain that could answer later (an unknown kind, …)
		}
		r.log.Debug("one-way grain command not carried out; retrying", "kind", kind, "identity", identity,
			"attempt", attempt, "backoff", backoff, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("not carried out in %s (%d attempts): %w", r.cfg.SendTimeout, attempt, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxSendBackoff)
	}
}

// retryableReply reports whether a grain's answer means it did not carry
// the command out and a later attempt may: UNAVAILABLE (freshness check
// or append failed: no leader, store closed, a superseded activation) or
// ABORTED (another writer won the append twice).
func retryableReply(r *internalpb.Reply) bool {
	switch r.GetCode() {
	case errorpb.Code_UNAVAILABLE, errorpb.Code_ABORTED:
		return true
	}
	return false
}

// isReport reports whether cmd is a worker's instance report to a job
// grain (with no deadline): it carries the worker session's epoch, and the
// job grain ignores one older than the node's newest session, so it is
// safe however late it is handled and Send retries it past failovers.
// NodeGone is not one: it names no session, and one delivered after the
// node came back would end the instances placed on it since.
func isReport(cmd proto.Message) bool {
	c, ok := cmd.(*internalpb.JobCommand)
	return ok && c.GetDeadline() == nil && c.GetInstanceReport() != nil
}

// Stop abandons pending sends and waits for the router's goroutines.
func (r *Router) Stop() {
	r.mu.Lock()
	r.cancel() // under mu: a concurrent Send either sees it or is waited for
	r.mu.Unlock()
	r.wg.Wait()
}
