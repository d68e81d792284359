package worker

import "sync"

// keyQueue runs functions one at a time, in submission order, per JobKey,
// and concurrently across keys: a slow provision of one job never delays a
// stop of another, and a stop never overtakes the provision before it.
type keyQueue struct {
	goFunc func(func()) // starts a tracked goroutine (Agent.goFunc)

	mu struct {
		sync.Mutex
		pending map[JobKey][]func() // present while a drainer runs for the key
		closed  bool
	}
}

func newKeyQueue(goFunc func(func())) *keyQueue {
	q := &keyQueue{goFunc: goFunc}
	q.mu.pending = make(map[JobKey][]func())
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
	if fs, busy := q.mu.pending[key]; busy {
		q.mu.pending[key] = append(fs, f)
		return true
	}
	q.mu.pending[key] = []func(){}
	q.goFunc(func() { q.drain(key, f) })
	return true
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
		q.mu.Unlock()
	}
}

// Close refuses new work. Queued functions still run (their context is
// cancelled by then, so they return quickly).
func (q *keyQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = true
}
