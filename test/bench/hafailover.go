package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// clearStreak is how long the writes must all succeed, after the last
// failed one, before a kill's outage counts as over.
const clearStreak = 2 * time.Second

// recoverTimeout bounds each wait of the HA trials (a new leader, writes
// succeeding again, a restarted manager catching up).
const recoverTimeout = 60 * time.Second

// failoverTrial is what one leader kill measured.
type failoverTrial struct {
	at                  time.Time // the kill
	killed, leader      string    // the killed leader, the new one
	term                uint64    // the new leader's term
	leaderFirst         time.Duration
	leaderAll           time.Duration
	leaderOK            bool
	out                 outage
	outOK               bool
	serving, caughtUp   time.Duration // restart → SERVING, → applied the leader's commit index
	servingOK, caughtOK bool
}

// runFailover runs a 3-manager cluster with open-loop CreateJob writers on
// every manager and, e.failoverTrials times, SIGKILLs the Raft leader,
// measures kill → a new leader known and kill → the first write
// acknowledged, restarts the killed manager and waits until it serves and
// has caught up.
func runFailover(ctx context.Context, e *env) error {
	c, err := e.newCluster("failover", 3, "info")
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.startAll(); err != nil {
		return err
	}
	if _, err := waitServing(ctx, c.ms, recoverTimeout); err != nil {
		return err
	}
	w, err := startWrites(e, c.ms, "failover")
	if err != nil {
		return err
	}
	defer w.close()
	var trials []failoverTrial
	for i := range e.failoverTrials {
		t, err := failoverOnce(ctx, c, w)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		trials = append(trials, t)
	}
	w.close()
	printFailover(e, w, trials)
	printNote(e, c.closeNote())
	return nil
}

// failoverOnce waits for a stable cluster and clean writes, kills the
// leader, measures, restarts it and waits until it has caught up.
func failoverOnce(ctx context.Context, c *haCluster, w *writeLoad) (failoverTrial, error) {
	var t failoverTrial
	leader, err := c.waitStable(ctx, recoverTimeout)
	if err != nil {
		return t, err
	}
	if _, err := w.waitSettled(ctx, time.Now(), clearStreak, recoverTimeout); err != nil {
		return t, fmt.Errorf("before the kill: %w", err)
	}
	idx := 0
	var survivors []*haManager
	for i, m := range c.ms {
		if m == leader {
			idx = i
		} else {
			survivors = append(survivors, m)
		}
	}
	t.killed = leader.name
	w.pause(idx)
	kill := time.Now()
	t.at = kill
	leader.kill()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.leader, t.term, t.leaderFirst, t.leaderAll, t.leaderOK = watchNewLeader(ctx, survivors, leader.name, kill)
	}()
	o, err := w.waitSettled(ctx, kill, clearStreak, recoverTimeout)
	t.out, t.outOK = o, err == nil
	wg.Wait()

	restart := time.Now()
	if err := c.start(leader); err != nil {
		return t, err
	}
	at, err := waitServing(ctx, []*haManager{leader}, recoverTimeout)
	if err != nil {
		return t, fmt.Errorf("restart %s: %w", leader.name, err)
	}
	t.serving, t.servingOK = at.Sub(restart), true
	// Caught up: applied what the leader had committed when it served.
	var target uint64
	if l := c.byName(t.leader); l != nil {
		if st, err := l.status(ctx); err == nil {
			target = st.GetCommitIndex()
		}
	}
	if target > 0 {
		at, err = poll(ctx, recoverTimeout, pollEvery, leader.name+" caught up", func() (bool, error) {
			st, err := leader.status(ctx)
			return err == nil && st.GetAppliedIndex() >= target, err
		})
		if err == nil {
			t.caughtUp, t.caughtOK = at.Sub(restart), true
		}
	}
	w.resume(idx)
	return t, nil
}

// watchNewLeader polls the survivors' own status until every one reports
// the same leader other than old. It returns that leader and its term, the
// time from t0 until a survivor first reported a new leader and until all
// did, and false if that did not happen within recoverTimeout.
func watchNewLeader(ctx context.Context, survivors []*haManager, old string, t0 time.Time) (string, uint64, time.Duration, time.Duration, bool) {
	var first time.Duration
	var leader string
	var term uint64
	at, err := poll(ctx, recoverTimeout, pollEvery, "a new leader", func() (bool, error) {
		sts := make([]string, len(survivors))
		terms := make([]uint64, len(survivors))
		var wg sync.WaitGroup
		for i, m := range survivors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if st, err := m.status(ctx); err == nil {
					sts[i], terms[i] = st.GetLeader(), st.GetTerm()
				}
			}()
		}
		wg.Wait()
		now := time.Now()
		all := true
		for i, l := range sts {
			if l != "" && l != old {
				if first == 0 {
					first = now.Sub(t0)
				}
				term = max(term, terms[i])
			}
			if l == "" || l == old || l != sts[0] {
				all = false
			}
		}
		leader = sts[0]
		return all, nil
	})
	if err != nil {
		return "", 0, first, 0, false
	}
	return leader, term, first, at.Sub(t0), true
}

func printFailover(e *env, w *writeLoad, trials []failoverTrial) {
	out := e.out
	fmt.Fprintln(out, "## failover")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Three norsk-manager processes (fsync on) formed with `--bootstrap-expect 3`, %s. "+
		"Open-loop writers: every manager gets a CreateJob (the bench job) every %s on its own connection, each request in its own goroutine; "+
		"a write not acknowledged within %s counts as failed. %d trials; each: wait until the three serve, agree on a leader, are voters and have applied "+
		"what the leader had applied (its applied index), and the writes have all succeeded for %s; stop writing to the leader, SIGKILL it (t0); "+
		"poll the survivors' own status (internal Cluster/Status) every %s; wait until the writes sent after t0 have all succeeded for %s "+
		"after the last failed one; restart the killed manager on its data dir and ports, wait until it serves and has applied the new leader's commit index.\n\n",
		timingsLine(e.timings), e.writeInterval, writeTimeout, len(trials), clearStreak, pollEvery, clearStreak)
	var lFirst, lAll, ack, clear, slow, serving, caught durs
	for _, t := range trials {
		lFirst.add(t.leaderFirst, t.leaderFirst > 0)
		lAll.add(t.leaderAll, t.leaderOK)
		ack.add(t.out.firstAck.Sub(t.at), t.outOK)
		clear.add(t.out.clearFrom.Sub(t.at), t.outOK)
		slow.add(t.out.slowest, t.outOK)
		serving.add(t.serving, t.servingOK)
		caught.add(t.caughtUp, t.caughtOK)
	}
	fmt.Fprintln(out, latencyHeader)
	lFirst.row(e, "kill → a survivor reports a new leader")
	lAll.row(e, "kill → both survivors report the same new leader")
	ack.row(e, "kill → first CreateJob sent after the kill acknowledged")
	clear.row(e, "kill → every CreateJob sent from then on acknowledged")
	slow.row(e, "slowest acknowledged CreateJob sent after the kill")
	serving.row(e, "restart → the killed manager SERVING")
	caught.row(e, "restart → the killed manager applied the leader's commit index")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| trial | killed | new leader (term) | new leader ms | first ack ms | all acked from ms | writes after the kill: ok / failed | failed by code |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	for i, t := range trials {
		nl, first, clr := "none within "+recoverTimeout.String(), "–", "–"
		if t.leaderOK {
			nl = fmt.Sprintf("%s (%d)", t.leader, t.term)
		}
		if t.outOK {
			first, clr = fmtMs(ms(t.out.firstAck.Sub(t.at))), fmtMs(ms(t.out.clearFrom.Sub(t.at)))
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %d / %d | %s |\n", i+1, t.killed, nl, fmtMs(ms(t.leaderAll)), first, clr,
			t.out.ok, t.out.fails, fmtCodes(t.out.codes))
	}
	ok, fails, byCode := w.total()
	fmt.Fprintf(out, "\nAll writes of the run: %d acknowledged, %d failed (%s); %d ticks skipped with %d requests in flight.\n",
		ok, fails, fmtCodes(byCode), w.skipped.Load(), maxInflight)
	for i, t := range trials {
		if t.out.firstErr != nil && t.out.codes[codes.DeadlineExceeded] < t.out.fails {
			fmt.Fprintf(out, "Trial %d, first failed write: %v\n", i+1, t.out.firstErr)
			break
		}
	}
	fmt.Fprintln(out)
	p99 := ack.p99()
	fmt.Fprintf(out, "Target: kill → first acknowledged CreateJob p99 %s ms < 3000 ms: %s\n\n", fmtMs(ms(p99)), met(ack.fails == 0 && p99 < 3*time.Second))
}
