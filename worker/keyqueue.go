package worker

import "sync"

// keyQueue runs functions one at a time, in submission order, per JobKey,
// and concurrently across keys: a slow provision of one job never delays a
// stop of another, and a stop never overtakes the provision before it.
//
// A job-wide function (DoJob) is a barrier for every role of its job id: it
// runs once everything queued before it for any role of the job has
// finished, and everything queued after it for any role of the job waits
// for it. Other jobs are not affected.
type keyQueue struct {
	goFunc func(func()) // starts a tracked goroutine (Agent.goFunc)

	mu struct {
		sync.Mutex
		pending  map[JobKey][]func()   // present while a drainer runs for the key
		active   map[JobID]int         // drainers running per job id (absent: 0)
		barriers map[JobID]*jobBarrier // present from DoJob until its function ran
		closed   bool
	}
}

// jobBarrier is a job-wide function waiting for, or running after, the
// drainers of its job, and what was queued for the job behind it.
type jobBarrier struct {
	f    func()
	held []heldOp // in submission order; replayed once f has run
}

// heldOp is a Do (job false) or DoJob (job true) queued behind a barrier.
type heldOp struct {
	key JobKey
	job bool
	f   func()
}

func newKeyQueue(goFunc func(func())) *keyQueue {
	q := &keyQueue{goFunc: goFunc}
	q.mu.pending = make(map[JobKey][]func())
	q.mu.active = make(map[JobID]int)
	q.mu.barriers = make(map[JobID]*jobBarrier)
	return q
}

// Do queues f for key. It returns false, without running f, once the queue
// is closed.
func (q *keyQueue) Do(key JobKey, f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return false
	}
	q.doLocked(key, f)
	return true
}

// DoJob queues f for every role of job id: it runs after everything queued
// before it for the job and before everything queued after it. It returns
// false, without running f, once the queue is closed.
func (q *keyQueue) DoJob(id JobID, f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return false
	}
	q.doJobLocked(id, f)
	return true
}

// doLocked queues f for key; q.mu must be held.
func (q *keyQueue) doLocked(key JobKey, f func()) {
	if b := q.mu.barriers[key.JobID]; b != nil {
		b.held = append(b.held, heldOp{key: key, f: f})
		return
	}
	if fs, busy := q.mu.pending[key]; busy {
		q.mu.pending[key] = append(fs, f)
		return
	}
	q.mu.pending[key] = []func(){}
	q.mu.active[key.JobID]++
	q.goFunc(func() { q.drain(key, f) })
}

// doJobLocked queues the job-wide f for id; q.mu must be held.
func (q *keyQueue) doJobLocked(id JobID, f func()) {
	if b := q.mu.barriers[id]; b != nil {
		b.held = append(b.held, heldOp{key: JobKey{JobID: id}, job: true, f: f})
		return
	}
	q.mu.barriers[id] = &jobBarrier{f: f}
	if q.mu.active[id] == 0 {
		q.goFunc(func() { q.runBarrier(id) })
	}
	// Otherwise the last drainer of the job runs it.
}

func (q *keyQueue) drain(key JobKey, f func()) {
	for f != nil {
		f()
		q.mu.Lock()
		fs := q.mu.pending[key]
		if len(fs) == 0 {
			delete(q.mu.pending, key)
			f = nil
		} else {
			f = fs[0]
			q.mu.pending[key] = fs[1:]
		}
		barrierDue := false
		if f == nil {
			if q.mu.active[key.JobID]--; q.mu.active[key.JobID] == 0 {
				delete(q.mu.active, key.JobID)
				barrierDue = q.mu.barriers[key.JobID] != nil
			}
		}
		q.mu.Unlock()
		if barrierDue {
			q.runBarrier(key.JobID)
		}
	}
}

// runBarrier runs the barrier of id (no drainer of id is running), then
// replays what was queued behind it, in order.
func (q *keyQueue) runBarrier(id JobID) {
	q.mu.Lock()
	b := q.mu.barriers[id]
	q.mu.Unlock()
	b.f()
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.mu.barriers, id)
	// Replayed even after Close, like functions already queued per key:
	// they were accepted before it.
	for _, h := range b.held {
		if h.job {
			q.doJobLocked(id, h.f)
		} else {
			q.doLocked(h.key, h.f)
		}
	}
}

// Close refuses new work. Queued functions still run (their context is
// cancelled by then, so they return quickly).
func (q *keyQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = true
}
