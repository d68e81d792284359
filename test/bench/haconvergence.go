package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// formTrial is one start of a cluster of managers at once.
type formTrial struct {
	firstLeader time.Duration // start → some manager reports a leader
	agreed      time.Duration // start → all report the same leader and are all voters
	serving     time.Duration // start → all SERVING
	stable      time.Duration // start → waitStable (also the leader's ClusterMembers lists all alive)
	ok          bool
	stableOK    bool
	leader      string
	term        uint64
}

// joinTrial is one manager joining a running 3-manager cluster.
type joinTrial struct {
	voter, serving, caughtUp       time.Duration // start → a voter knowing the leader, → SERVING, → applied the leader's applied index
	voterOK, servingOK, caughtUpOK bool
}

// runConvergence measures, for each size of e.convergenceSizes and
// e.convergenceTrials times, the start of that many managers at once with
// --bootstrap-expect N until one leader is agreed by all with all N
// voters; and, as many times, a 4th manager started with --join on a
// running 3-manager cluster until it is a voter and serving.
func runConvergence(ctx context.Context, e *env) error {
	forms := map[int][]formTrial{}
	var joins []joinTrial
	var notes []string
	for _, n := range e.convergenceSizes {
		for range e.convergenceTrials {
			t, err := formOnce(ctx, e, n, false, &joins, &notes)
			if err != nil {
				return fmt.Errorf("%d managers: %w", n, err)
			}
			forms[n] = append(forms[n], t)
		}
	}
	// Joins run on the 3-manager clusters of the trials above, or on
	// clusters of their own if 3 is not among the sizes.
	for len(joins) < e.convergenceTrials {
		if _, err := formOnce(ctx, e, 3, true, &joins, &notes); err != nil {
			return fmt.Errorf("join: %w", err)
		}
	}
	printConvergence(e, forms, joins)
	for _, n := range notes {
		printNote(e, n)
	}
	return nil
}

// formOnce starts n fresh managers at once and measures their
// convergence; with n == 3 (or join) it then measures a joining 4th
// manager and appends it to joins. A failure to stop the cluster cleanly
// is appended to notes.
func formOnce(ctx context.Context, e *env, n int, join bool, joins *[]joinTrial, notes *[]string) (formTrial, error) {
	var t formTrial
	if _, err := e.binaries(ctx); err != nil { // built before t0
		return t, err
	}
	c, err := e.newCluster(fmt.Sprintf("convergence-%d", n), n, "info")
	if err != nil {
		return t, err
	}
	defer c.close()
	start := time.Now()
	if err := c.startAll(); err != nil {
		return t, err
	}
	t, err = watchFormation(ctx, c.ms, start)
	if err != nil {
		return t, err
	}
	_, stableErr := c.waitStable(ctx, recoverTimeout)
	if stableErr == nil {
		t.stable, t.stableOK = time.Since(start), true
	}
	if n == 3 || join {
		if !t.stableOK {
			return t, fmt.Errorf("no stable cluster to join: %w", stableErr)
		}
		j, err := joinOnce(ctx, c)
		if err != nil {
			return t, err
		}
		*joins = append(*joins, j)
	}
	if note := c.closeNote(); note != "" {
		*notes = append(*notes, note)
	}
	return t, nil
}

// watchFormation polls ms (their own status and their health) every
// pollEvery from start until all report the same leader among them and
// all are voters, and all serve.
func watchFormation(ctx context.Context, ms []*haManager, start time.Time) (formTrial, error) {
	var t formTrial
	_, err := poll(ctx, recoverTimeout, pollEvery, fmt.Sprintf("%d managers agreeing on a leader, all voters and SERVING", len(ms)), func() (bool, error) {
		if err := exitedErr(ms); err != nil {
			return false, err
		}
		sts := make([]*internalpb.ManagerStatus, len(ms))
		serving := make([]bool, len(ms))
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sts[i], _ = m.status(ctx)
				serving[i] = m.serving(ctx)
			}()
		}
		wg.Wait()
		now := time.Since(start)
		agreed, allServing := true, true
		for i, st := range sts {
			if st.GetLeader() != "" && t.firstLeader == 0 {
				t.firstLeader = now
			}
			if st == nil || st.GetLeader() == "" || st.GetLeader() != sts[0].GetLeader() || !st.GetVoter() {
				agreed = false
			}
			if !serving[i] {
				allServing = false
			}
		}
		if agreed && !slices.ContainsFunc(ms, func(m *haManager) bool { return m.name == sts[0].GetLeader() }) {
			agreed = false
		}
		if agreed && t.agreed == 0 {
			t.agreed, t.leader = now, sts[0].GetLeader()
			for _, st := range sts {
				t.term = max(t.term, st.GetTerm())
			}
		}
		if allServing && t.serving == 0 {
			t.serving = now
		}
		return t.agreed > 0 && t.serving > 0, nil
	})
	t.ok = err == nil
	return t, err
}

// joinOnce adds a 4th manager to the running cluster c with --join (the
// gossip addresses of the others) and no --bootstrap-expect, and measures
// its start → it is a voter that knows the leader, → SERVING, → it has
// applied what the leader had applied when it became a voter
// (the leader's applied index: see waitStable).
func joinOnce(ctx context.Context, c *haCluster) (joinTrial, error) {
	var t joinTrial
	seeds := c.joinList()
	m, err := c.add(fmt.Sprintf("m%d", len(c.ms)+1))
	if err != nil {
		return t, err
	}
	m.flags = []string{"--join", seeds}
	start := time.Now()
	if err := c.start(m); err != nil {
		return t, err
	}
	var target uint64
	var leader *haManager
	_, err = poll(ctx, recoverTimeout, pollEvery, m.name+" a voter, SERVING and caught up", func() (bool, error) {
		if err := exitedErr([]*haManager{m}); err != nil {
			return false, err
		}
		now := time.Since(start)
		st, err := m.status(ctx)
		if err != nil {
			return false, err
		}
		if !t.voterOK && st.GetVoter() && st.GetLeader() != "" {
			if leader = c.byName(st.GetLeader()); leader != nil {
				if lst, err := leader.status(ctx); err == nil {
					t.voter, t.voterOK, target = now, true, lst.GetAppliedIndex()
				}
			}
		}
		if !t.servingOK && m.serving(ctx) {
			t.serving, t.servingOK = now, true
		}
		if t.voterOK && !t.caughtUpOK && st.GetAppliedIndex() >= target {
			t.caughtUp, t.caughtUpOK = now, true
		}
		return t.voterOK && t.servingOK && t.caughtUpOK, nil
	})
	return t, err
}

func printConvergence(e *env, forms map[int][]formTrial, joins []joinTrial) {
	w := e.out
	fmt.Fprintln(w, "## convergence")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Fresh norsk-manager processes (fsync on, %s), each with `--join` = every manager's gossip address and "+
		"`--bootstrap-expect N`, started one right after the other (t0 = before the first start; process start-up included). "+
		"The bench polls every manager's own status (internal Cluster/Status) and health every %s. "+
		"%d start(s) per size. Then, on a 3-manager cluster that is stable, a 4th manager started with `--join` (the three gossip addresses) "+
		"and no `--bootstrap-expect` (t0 = its start): until its own status shows it a voter that knows the leader, until it is SERVING, "+
		"and until it has applied what the leader had applied at the moment it became a voter (the read index).\n\n",
		timingsLine(e.timings), pollEvery, e.convergenceTrials)
	fmt.Fprintln(w, latencyHeader)
	for _, n := range e.convergenceSizes {
		var first, agreed, serving, stable durs
		for _, t := range forms[n] {
			first.add(t.firstLeader, t.firstLeader > 0)
			agreed.add(t.agreed, t.ok)
			serving.add(t.serving, t.ok)
			stable.add(t.stable, t.stableOK)
		}
		first.row(e, fmt.Sprintf("%d managers: start → a manager reports a leader", n))
		agreed.row(e, fmt.Sprintf("%d managers: start → one leader agreed by all, all %d voters", n, n))
		serving.row(e, fmt.Sprintf("%d managers: start → all SERVING", n))
		stable.row(e, fmt.Sprintf("%d managers: start → stable (also applied, ClusterMembers all alive)", n))
	}
	var voter, serving, caught durs
	for _, t := range joins {
		voter.add(t.voter, t.voterOK)
		serving.add(t.serving, t.servingOK)
		caught.add(t.caughtUp, t.caughtUpOK)
	}
	voter.row(e, "join a 4th: start → a voter knowing the leader")
	serving.row(e, "join a 4th: start → SERVING")
	caught.row(e, "join a 4th: start → applied what the leader had applied")
	fmt.Fprintln(w)
	for _, n := range e.convergenceSizes {
		var parts []string
		for _, t := range forms[n] {
			if t.ok {
				parts = append(parts, fmt.Sprintf("%s (%s, term %d)", fmtMs(ms(t.agreed)), t.leader, t.term))
			} else {
				parts = append(parts, "none")
			}
		}
		fmt.Fprintf(w, "- %d managers, start → agreed leader with all voters, per trial (ms): %s\n", n, strings.Join(parts, ", "))
	}
	var parts []string
	for _, t := range joins {
		parts = append(parts, fmt.Sprintf("voter %s / serving %s", fmtMs(ms(t.voter)), fmtMs(ms(t.serving))))
	}
	fmt.Fprintf(w, "- join a 4th, per trial (ms): %s\n\n", strings.Join(parts, ", "))
}
