package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// thawWatch polls, from SIGCONT on, whether the thawed manager serves:
// its health answers SERVING and its own Cluster/Status names the leader
// every manager of the cluster names (so a thawed leader's stale view of
// itself does not count). It records the first such sample and the start
// of the streak of such samples that lasts until the watch ends, and when
// the thawed manager's status first shows it applied the target index
// (what the leader had applied at SIGCONT). A sample counts at its end
// (its answers may have been given at any moment up to then).
type thawWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	first  time.Time // first serving sample; guarded by mu
	streak time.Time // start of the current streak, zero while not serving; guarded by mu
	downs  int       // serving → not serving transitions; guarded by mu
	caught time.Time // first sample with the victim's applied index >= target; guarded by mu
}

// watchThaw starts polling victim (and the statuses of ms) every pollEvery.
func watchThaw(victim *haManager, ms []*haManager, target uint64) *thawWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &thawWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			ok := victim.serving(ctx)
			l, sts, err := agreedLeader(ctx, ms)
			caught := false
			for i, st := range sts {
				caught = caught || ms[i] == victim && st.GetAppliedIndex() >= target
			}
			if ctx.Err() != nil {
				return // cut short by stop: not a sample
			}
			w.sample(time.Now(), ok && err == nil && l != nil, caught)
			select {
			case <-ctx.Done():
			case <-time.After(pollEvery):
			}
		}
	}()
	return w
}

func (w *thawWatch) sample(at time.Time, ok, caught bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if caught && w.caught.IsZero() {
		w.caught = at
	}
	switch {
	case ok && w.first.IsZero():
		w.first, w.streak = at, at
	case ok && w.streak.IsZero():
		w.streak = at
	case !ok && !w.streak.IsZero():
		w.streak = time.Time{}
		w.downs++
	}
}

// thawSeen is what a thawWatch saw; zero times for what did not happen.
type thawSeen struct {
	first, streak, caught time.Time
	downs                 int
}

// stop ends the watch: the first serving sample, the start of the final
// serving streak (zero if it did not serve at the end), how often it
// stopped serving again after serving, and when it had caught up.
func (w *thawWatch) stop() thawSeen {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return thawSeen{first: w.first, streak: w.streak, caught: w.caught, downs: w.downs}
}

// thaw is a SIGCONT: when, the catch-up target (the leader's applied
// index just before), and the watch of the thawed manager started then.
type thaw struct {
	at     time.Time
	target uint64
	watch  *thawWatch
	err    error
}

// thawAt SIGCONTs victim at the given time, from a timer: it reads the
// leader's applied index among the survivors first, and starts watching
// the victim right after the signal.
func thawAt(victim *haManager, survivors, all []*haManager, at time.Time) <-chan thaw {
	ch := make(chan thaw, 1)
	time.AfterFunc(time.Until(at), func() {
		var th thaw
		if l, sts, err := agreedLeader(context.Background(), survivors); err == nil && l != nil {
			for i, st := range sts {
				if survivors[i] == l {
					th.target = st.GetAppliedIndex()
				}
			}
		}
		th.err = victim.proc.cmd.Process.Signal(syscall.SIGCONT)
		th.at = time.Now()
		th.watch = watchThaw(victim, all, th.target)
		ch <- th
	})
	return ch
}

// logMark is a position in a manager's log file.
type logMark struct {
	path string
	off  int64
}

// markLog returns the current end of m's log.
func markLog(m *haManager) logMark {
	lm := logMark{path: m.proc.log}
	if fi, err := os.Stat(lm.path); err == nil {
		lm.off = fi.Size()
	}
	return lm
}

// logged returns the times (the slog "time=" field) of the lines written
// after the mark whose message starts with msg.
func (lm logMark) logged(msg string) []time.Time {
	f, err := os.Open(lm.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(lm.off, io.SeekStart); err != nil {
		return nil
	}
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	want := `msg="` + msg
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, want) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// The log messages the freeze scenario times (cluster/agent, actors/node).
const (
	logRejoinDecided = "the other managers declared this one failed"
	logRejoined      = "rejoined the actor cluster"
	logPassivating   = "worker session taken by another activation of this node grain; passivating"
)
