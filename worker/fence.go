package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
)

// The fence (docs/design/worker-sessions.md §8): a worker cut off from
// every manager stops, by itself, the jobs whose WorkerJob.fence is set,
// before the managers may start another copy of them elsewhere.
//
// The lease runs on this worker's own clock only (fenceClock: monotonic,
// counting suspend), from the moment it sent the last health a manager
// acknowledged (health_ack), so neither wall-clock skew nor a delayed ack
// can stretch it. A manager acknowledges a health only while its node
// grain holds the session healthy, and declares the node lost only
// LostTimeout (WorkerFence.replace_after_ms) after the session was last
// healthy, so no other copy can start sooner than replace_after after that
// health was sent. The worker begins the stop at
//
//	replace_after - StopGrace - fenceMargin(replace_after)
//
// after it, so that the stop (SIGTERM, the grace, SIGKILL) is over first.
const (
	// FenceFile is the file in the state directory where the worker keeps
	// its last acknowledged health (its fence clock and boot id), so that
	// a restarted worker that hears no manager still fences re-adopted
	// jobs on time.
	FenceFile = "fence-lease.json"

	// defaultReplaceAfter is the managers' LostTimeout a WorkerFence
	// without replace_after_ms stands for (the managers' default).
	defaultReplaceAfter = 30 * time.Second

	// fenceTick is how often the fence looks at the running jobs; its
	// lateness is part of fenceMargin.
	fenceTick = 250 * time.Millisecond

	// fencePersistEvery bounds how often the lease is written to FenceFile.
	// The file may lag by this much, which makes a restarted worker fence
	// earlier, never later.
	fencePersistEvery = 5 * time.Second
)

// fenceMargin is what the lease keeps back from the managers' guarantee
// for timer lateness (fenceTick, a loaded host), the time a SIGKILLed
// service takes to exit after the grace, and clock rate differences
// between worker and manager (NTP slews at most 500 ppm; 5 % is a hundred
// times that): 1 s + 5 % of replaceAfter.
func fenceMargin(replaceAfter time.Duration) time.Duration {
	return time.Second + replaceAfter/20
}

// FenceLease is how long after sending its last acknowledged health a
// worker with stop grace grace begins to stop a job fenced with f (never
// negative): f's replace_after (default 30 s) less grace and fenceMargin.
// With the defaults (30 s, grace 10 s): 17.5 s.
func FenceLease(f *workerpb.WorkerFence, grace time.Duration) time.Duration {
	after := time.Duration(f.GetReplaceAfterMs()) * time.Millisecond
	if after <= 0 {
		after = defaultReplaceAfter
	}
	return max(after-grace-fenceMargin(after), 0)
}

// lease tracks the worker's fence lease: the health messages sent with a
// seq, and the send time of the newest one a manager acknowledged. Safe
// for concurrent use.
type lease struct {
	log  *slog.Logger
	dir  string               // state directory (FenceFile); "" keeps nothing
	now  func() time.Duration // fence clock
	boot string               // boot id the fence clock belongs to ("" unknown)

	mu struct {
		sync.Mutex
		seq     uint64
		sent    map[uint64]time.Duration // seq -> send time, unacknowledged ones
		acked   time.Duration            // send time of the newest acknowledged health
		valid   bool                     // acked is known (else the lease is expired)
		written time.Duration            // when FenceFile was last written
	}
}

// leaseRecord is FenceFile's content.
type leaseRecord struct {
	BootID string `json:"boot_id"`
	// AckedNs is the fence clock (nanoseconds since boot) at which the
	// last acknowledged health was sent.
	AckedNs int64 `json:"acked_ns"`
}

// newLease returns the lease of a worker with state directory dir, read
// from FenceFile when it was written during this boot; otherwise the lease
// starts expired: a worker that cannot tell how long ago it last heard a
// manager assumes the worst.
func newLease(log *slog.Logger, dir string) *lease {
	l := &lease{log: log, dir: dir}
	l.now, l.boot = fenceClock()
	l.mu.sent = map[uint64]time.Duration{}
	if dir == "" {
		return l
	}
	b, err := os.ReadFile(filepath.Join(dir, FenceFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l
	case err != nil:
		log.Warn("reading the fence lease; fenced jobs count as cut off", "error", err)
		return l
	}
	var r leaseRecord
	if err := json.Unmarshal(b, &r); err != nil {
		log.Warn("the fence lease file is unreadable; fenced jobs count as cut off", "file", FenceFile, "error", err)
		return l
	}
	if l.boot == "" || r.BootID != l.boot {
		log.Info("the fence lease was written before a reboot; fenced jobs count as cut off")
		return l
	}
	at := time.Duration(r.AckedNs)
	if at > l.now() {
		return l // not of this clock
	}
	l.mu.acked, l.mu.valid, l.mu.written = at, true, at
	return l
}

// nextSeq returns the seq of a health about to be sent, and records when.
func (l *lease) nextSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.seq++
	l.mu.sent[l.mu.seq] = l.now()
	// Acks come in order on one stream; older ones were lost with their
	// session. Keep the map small.
	for s := range l.mu.sent {
		if s+64 < l.mu.seq {
			delete(l.mu.sent, s)
		}
	}
	return l.mu.seq
}

// ack renews the lease from the send time of health seq. Unknown seqs
// (from another process, or forgotten) change nothing.
func (l *lease) ack(seq uint64) {
	l.mu.Lock()
	at, ok := l.mu.sent[seq]
	if !ok {
		l.mu.Unlock()
		return
	}
	for s := range l.mu.sent {
		if s <= seq {
			delete(l.mu.sent, s)
		}
	}
	if l.mu.valid && at <= l.mu.acked {
		l.mu.Unlock()
		return
	}
	l.mu.acked, l.mu.valid = at, true
	write := l.dir != "" && l.boot != "" && at-l.mu.written >= fencePersistEvery
	if write {
		l.mu.written = at
	}
	l.mu.Unlock()
	if write {
		l.persist(at)
	}
}

func (l *lease) persist(at time.Duration) {
	b, err := json.Marshal(leaseRecord{BootID: l.boot, AckedNs: int64(at)})
	if err == nil {
		err = atomicfile.Write(filepath.Join(l.dir, FenceFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		l.log.Warn("writing the fence lease (a restart would fence from an older one)", "error", err)
	}
}

// sinceAck returns how long ago the last acknowledged health was sent, and
// false if none is known (the lease is expired).
func (l *lease) sinceAck() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.valid {
		return 0, false
	}
	return l.now() - l.mu.acked, true
}

// runFence stops fenced jobs whose lease ran out, every fenceTick, until
// ctx ends. A job is stopped once per instance; the stop goes through the
// ordinary per-key command queue, like a manager's stop_job.
func (a *Agent) runFence(ctx context.Context) {
	t := time.NewTicker(fenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.fenceOnce()
	}
}

// fenceOnce is one look of runFence at the running jobs. An instance
// whose fence stop was sent (markFenced) is not stopped again; its note
// goes when its EventStopped does (takeFenced), at most one per key.
func (a *Agent) fenceOnce() {
	since, known := a.lease.sinceAck()
	for _, rj := range a.rt.List() {
		key := rj.Key()
		f := rj.Job.GetFence()
		if f == nil {
			continue
		}
		lease := FenceLease(f, a.cfg.StopGrace)
		if known && since < lease {
			continue
		}
		inst := rj.Job.GetInstanceId()
		if !a.markFenced(key, inst) {
			continue
		}
		cut := "never since this worker started"
		if known {
			cut = fmt.Sprintf("last acknowledged health sent %s ago", since.Round(time.Millisecond))
		}
		log := a.log.With("job_id", key.JobID, "role", key.Role, "instance_id", inst)
		log.Warn("fence: no manager contact for longer than the lease; stopping the job before the managers place it elsewhere",
			"lease", lease, "manager_contact", cut, "replace_after_ms", f.GetReplaceAfterMs())
		a.stop(key, inst, log)
	}
}

// markFenced notes that the fence is stopping instance inst of key, so
// that the EventStopped of that stop tells the manager (takeFenced); false
// if it was noted already (the stop was sent).
func (a *Agent) markFenced(key JobKey, inst string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if got, ok := a.mu.fenced[key]; ok && got == inst {
		return false
	}
	if a.mu.fenced == nil {
		a.mu.fenced = map[JobKey]string{}
	}
	a.mu.fenced[key] = inst
	return true
}

// takeFenced reports whether the fence stopped instance inst of key (the
// instance markFenced noted), and forgets it. An EventStopped for another
// instance (a newer start, or the manager's own stop of an older one)
// leaves the note alone.
func (a *Agent) takeFenced(key JobKey, inst string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, ok := a.mu.fenced[key]
	if !ok || got != inst {
		return false
	}
	delete(a.mu.fenced, key)
	return true
}
