package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// writeTimeout bounds one CreateJob of the open-loop writers: a write not
// acknowledged within it counts as failed (DeadlineExceeded).
const writeTimeout = 5 * time.Second

// maxInflight bounds the requests in flight per manager; a tick that finds
// that many is skipped (and counted).
const maxInflight = 1024

// writeRec is one completed CreateJob.
type writeRec struct {
	sent, done time.Time
	err        error
	m          int // index of the manager it went to
}

// writeLoad sends CreateJob to every manager of a cluster, each on its own
// connection, open loop: one request every e.writeInterval per manager
// (managers staggered), each in its own goroutine whatever the earlier
// ones are doing. Every job id is new.
type writeLoad struct {
	e       *env
	ms      []*haManager
	conns   []*grpc.ClientConn
	apis    []managerpb.ManagerClient
	paused  []atomic.Bool
	flying  []atomic.Int64
	skipped atomic.Int64
	seq     atomic.Int64
	stop    context.CancelFunc
	ticks   sync.WaitGroup
	reqs    sync.WaitGroup

	mu      sync.Mutex
	recs    []writeRec          // guarded by mu
	pending map[int64]time.Time // request → sent; guarded by mu
}

func startWrites(e *env, ms []*haManager, prefix string) (*writeLoad, error) {
	w := &writeLoad{e: e, ms: ms, conns: make([]*grpc.ClientConn, len(ms)), apis: make([]managerpb.ManagerClient, len(ms)),
		paused: make([]atomic.Bool, len(ms)), flying: make([]atomic.Int64, len(ms)), pending: map[int64]time.Time{}}
	for i, m := range ms {
		conn, err := dialFast(m.api)
		if err != nil {
			w.close()
			return nil, err
		}
		w.conns[i], w.apis[i] = conn, managerpb.NewManagerClient(conn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	for i := range ms {
		w.ticks.Add(1)
		go func() {
			defer w.ticks.Done()
			// Stagger the managers' ticks over one interval.
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.writeInterval * time.Duration(i) / time.Duration(len(ms))):
			}
			t := time.NewTicker(e.writeInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if w.paused[i].Load() {
					continue
				}
				if w.flying[i].Load() >= maxInflight {
					w.skipped.Add(1)
					continue
				}
				w.send(ctx, i, prefix)
			}
		}()
	}
	return w, nil
}

func (w *writeLoad) send(ctx context.Context, i int, prefix string) {
	n := w.seq.Add(1)
	sent := time.Now()
	w.mu.Lock()
	w.pending[n] = sent
	w.mu.Unlock()
	w.flying[i].Add(1)
	w.reqs.Add(1)
	go func() {
		defer w.reqs.Done()
		defer w.flying[i].Add(-1)
		cctx, cancel := context.WithTimeout(ctx, writeTimeout)
		_, err := w.apis[i].CreateJob(cctx, benchJob(fmt.Sprintf("%s-%08d", prefix, n), int(n)))
		cancel()
		done := time.Now()
		w.mu.Lock()
		delete(w.pending, n)
		w.recs = append(w.recs, writeRec{sent: sent, done: done, err: err, m: i})
		w.mu.Unlock()
	}()
}

// pause stops sending to manager i (before it is killed); resume starts
// again.
func (w *writeLoad) pause(i int)  { w.paused[i].Store(true) }
func (w *writeLoad) resume(i int) { w.paused[i].Store(false) }

// close stops the writers and waits for the requests in flight.
func (w *writeLoad) close() {
	if w.stop != nil {
		w.stop()
	}
	w.ticks.Wait()
	w.reqs.Wait()
	for _, c := range w.conns {
		if c != nil {
			c.Close()
		}
	}
}

// outage is what the writes sent at or after an instant (a kill) saw.
type outage struct {
	firstAck  time.Time // first acknowledgement of a write sent at or after the instant
	clearFrom time.Time // sending time of the first write after the last failed one (zero: none yet)
	ok, fails int
	slowest   time.Duration // longest successful write
	codes     map[codes.Code]int
	firstErr  error
}

// outage summarises the writes sent at or after since. settled reports that
// a write was acknowledged and that the writes sent during the last streak
// (after the last failed one, up to the oldest still in flight or now) all
// succeeded.
func (w *writeLoad) outage(since time.Time, streak time.Duration) (o outage, settled bool) {
	now := time.Now()
	w.mu.Lock()
	// Records are appended as writes complete, so nearly in order of done;
	// a write sent at or after since is done after it.
	cut := since.Add(-time.Second)
	i := sort.Search(len(w.recs), func(i int) bool { return !w.recs[i].done.Before(cut) })
	recs := slices.Clone(w.recs[i:])
	oldest := now
	for _, s := range w.pending {
		if !s.Before(since) && s.Before(oldest) {
			oldest = s
		}
	}
	w.mu.Unlock()
	o.codes = map[codes.Code]int{}
	lastFail := since.Add(-time.Nanosecond)
	for _, r := range recs {
		if r.sent.Before(since) {
			continue
		}
		if r.err != nil {
			o.fails++
			o.codes[status.Code(r.err)]++
			if o.firstErr == nil {
				o.firstErr = r.err
			}
			if r.sent.After(lastFail) {
				lastFail = r.sent
			}
			continue
		}
		o.ok++
		o.slowest = max(o.slowest, r.done.Sub(r.sent))
		if o.firstAck.IsZero() || r.done.Before(o.firstAck) {
			o.firstAck = r.done
		}
	}
	for _, r := range recs {
		if r.err == nil && r.sent.After(lastFail) && (o.clearFrom.IsZero() || r.sent.Before(o.clearFrom)) {
			o.clearFrom = r.sent
		}
	}
	settled = !o.firstAck.IsZero() && !o.clearFrom.IsZero() && oldest.Sub(lastFail) >= streak
	return o, settled
}

// waitSettled waits (up to timeout) until the writes sent at or after since
// have settled (see outage) and returns their outage.
func (w *writeLoad) waitSettled(ctx context.Context, since time.Time, streak, timeout time.Duration) (outage, error) {
	var o outage
	_, err := poll(ctx, timeout, 20*time.Millisecond, "writes succeeding again", func() (bool, error) {
		var settled bool
		o, settled = w.outage(since, streak)
		return settled, nil
	})
	return o, err
}

// total counts every completed write and its errors by code.
func (w *writeLoad) total() (ok, fails int, byCode map[codes.Code]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byCode = map[codes.Code]int{}
	for _, r := range w.recs {
		if r.err == nil {
			ok++
		} else {
			fails++
			byCode[status.Code(r.err)]++
		}
	}
	return ok, fails, byCode
}

// fmtCodes formats error counts by code ("Unavailable 12, DeadlineExceeded 3").
func fmtCodes(m map[codes.Code]int) string {
	if len(m) == 0 {
		return "none"
	}
	var cs []codes.Code
	for c := range m {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return m[cs[i]] > m[cs[j]] || m[cs[i]] == m[cs[j]] && cs[i] < cs[j] })
	var s []string
	for _, c := range cs {
		s = append(s, fmt.Sprintf("%s %d", c, m[c]))
	}
	return strings.Join(s, ", ")
}
