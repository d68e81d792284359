package gateway

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Bounds of one JobSearch batch: the matching records read in one store
// read, then sent with no read open (docs/design/jobs.md, "Search
// semantics"). One record larger than searchBatchBytes is still read,
// alone.
const (
	searchBatchJobs  = 256
	searchBatchBytes = 1 << 20
)

// JobSearch streams the jobs matching every filter, in job-id order;
// environment values redacted for a caller below operator (redact.go).
//
// The matching ids are read first (indexes only), then the records in
// batches of at most searchBatchJobs jobs or searchBatchBytes bytes, each
// batch from its own store read, closed before the batch is sent: a client
// that reads slowly holds no read transaction (and none of the store's
// buffers such a read pins), only its batch. Each batch is a consistent
// read; the answer as a whole is not one snapshot.
//
// A client that accepts no message for EventStreamConfig.SendTimeout is
// ended with ResourceExhausted naming the timeout. A caller holding
// LimitsConfig.MaxJobSearchesPerCaller searches already, or a manager
// serving LimitsConfig.MaxJobSearches, answers a new one ResourceExhausted.
func (s *Server) JobSearch(req *managerpb.JobSearchRequest, stream managerpb.Manager_JobSearchServer) error {
	q, err := persistence.CompileJobQuery(req.GetJobFilter())
	if err != nil {
		return toStatus(err)
	}
	ctx := stream.Context()
	release, err := s.searches.acquire(callerKey(ctx))
	if err != nil {
		return err
	}
	defer release()
	var ids []string
	if err := s.view(ctx, func(r *persistence.Reader) error {
		ids, err = r.SearchJobIDs(q)
		return err
	}); err != nil {
		return toStatus(err)
	}
	send := newTimedSender(ctx, stream, s.cfg.Events.SendTimeout)
	defer send.close()
	var batch []*internalpb.JobRecord
	for len(ids) > 0 {
		batch = batch[:0]
		size := 0
		var n int
		if err := s.cfg.Store.View(func(r *persistence.Reader) error {
			n, err = r.MatchJobs(q, ids, func(rec *internalpb.JobRecord) (bool, error) {
				batch = append(batch, rec)
				size += proto.Size(rec)
				return len(batch) < searchBatchJobs && size < searchBatchBytes, nil
			})
			return err
		}); err != nil {
			return toStatus(err)
		}
		ids = ids[n:]
		for i, rec := range batch {
			batch[i] = nil // sent: no longer held here
			if err := send.send(redactFor(s, ctx, &managerpb.CurrentJob{Job: rec.GetJob().GetJob(), Instances: runningJobs(rec)})); err != nil {
				return err
			}
		}
	}
	return nil
}

// timedSender sends a stream's messages from its own goroutine so that the
// handler can give up on a client that accepts none for timeout: then the
// handler returns, and gRPC, tearing the stream down, ends the Send still
// blocked.
type timedSender struct {
	ctx     context.Context
	stream  managerpb.Manager_JobSearchServer
	timeout time.Duration
	msgs    chan *managerpb.CurrentJob
	done    chan error
}

func newTimedSender(ctx context.Context, stream managerpb.Manager_JobSearchServer, timeout time.Duration) *timedSender {
	t := &timedSender{ctx: ctx, stream: stream, timeout: timeout,
		msgs: make(chan *managerpb.CurrentJob), done: make(chan error, 1)}
	go func() {
		for m := range t.msgs {
			err := stream.Send(m)
			t.done <- err
			if err != nil {
				return
			}
		}
	}()
	return t
}

// send hands m to gRPC and waits until it is accepted: the Send's error,
// the caller's cancellation, or ResourceExhausted after the timeout.
func (t *timedSender) send(m *managerpb.CurrentJob) error {
	select {
	case t.msgs <- m:
	case err := <-t.done: // the previous Send failed after all
		return err
	case <-t.ctx.Done():
		return status.FromContextError(t.ctx.Err()).Err()
	}
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	select {
	case err := <-t.done:
		return err
	case <-t.ctx.Done():
		return status.FromContextError(t.ctx.Err()).Err()
	case <-timer.C:
		return status.Errorf(codes.ResourceExhausted,
			"job search: the client accepted no message for %s (the send timeout); the search was ended, read faster or search for fewer jobs", t.timeout)
	}
}

// close ends the sender goroutine once its Send (if one is blocked) returns.
func (t *timedSender) close() { close(t.msgs) }

// searchSlots counts the JobSearch calls being served, per caller and in
// all.
type searchSlots struct {
	perCaller, total int // <= 0: unlimited
	mu               struct {
		sync.Mutex
		open map[string]int
		all  int
	}
}

func newSearchSlots(perCaller, total int) *searchSlots {
	c := &searchSlots{perCaller: perCaller, total: total}
	c.mu.open = map[string]int{}
	return c
}

// acquire takes a slot for key, or returns ResourceExhausted naming the
// limit; release gives it back (once).
func (c *searchSlots) acquire(key string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perCaller > 0 && c.mu.open[key] >= c.perCaller {
		return nil, status.Errorf(codes.ResourceExhausted,
			"job search: %s already has %d searches running, the limit per caller (--max-job-searches-per-caller); wait for one to end", key, c.perCaller)
	}
	if c.total > 0 && c.mu.all >= c.total {
		return nil, status.Errorf(codes.ResourceExhausted,
			"job search: the manager already serves %d searches, the limit (--max-job-searches); retry later", c.total)
	}
	c.mu.open[key]++
	c.mu.all++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.mu.all--
			if c.mu.open[key]--; c.mu.open[key] <= 0 {
				delete(c.mu.open, key)
			}
		})
	}, nil
}

// running returns how many searches are being served.
func (c *searchSlots) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.all
}
