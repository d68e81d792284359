package main

import (
	"fmt"
	"strings"
	"time"
)

// printFreeze prints the freeze scenario's description, tables and
// verdicts.
func printFreeze(e *env, s *freezeSetup, trials []freezeTrial, took time.Duration) {
	out := e.out
	fmt.Fprintln(out, "## freeze")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Three norsk-manager processes (fsync on) formed with `--bootstrap-expect 3`, %s. "+
		"A norsk-ctl --mode=worker process (process runtime, `--manager-url` = all three) on a cluster slot whose node grain a follower hosts. "+
		"Per manager, two jobs whose grains it hosts (disthash over the actor addresses): a probe job (never started; its definition is replaced) "+
		"and a worker job running on the worker (a shell that writes its pid, then execs a process that lives until the bench exits). "+
		"One cluster for all %d trials. Each trial: wait until the cluster is stable and one manager has held the worker's session for %s; "+
		"pick the victim in turn: the Raft leader, the follower holding the worker's session, the follower that does neither "+
		"(the session holder is fixed by disthash: when it leads at a session-holder trial, that trial freezes the leader holding the session "+
		"and the next trial is the session-holder one again, the others having elected a new leader); "+
		"run rounds until one passes; SIGSTOP the victim; run rounds through the two survivors "+
		"(the victim's worker job stopped and started through each in turn) until %s before SIGCONT, which comes %s after SIGSTOP; "+
		"then run rounds through all three, the victim's worker job stopped and started through the thawed victim, "+
		"until the victim has logged its rejoin and %d rounds begun after it have passed in a row (at most %s).\n\n",
		timingsLine(e.timings), len(trials), ownerSettle, freezeQuiet, e.freezeFor, freezeSettleRounds, freezeTrialTimeout)
	fmt.Fprintf(out, "**A round** (one call at a time, each with a %s timeout): for each of the three probe jobs and each manager m, "+
		"JobById through the next manager must return the newest version (the one the bench last wrote, was acknowledged or read), "+
		"then UpdateJob through m with that version's current_hash must succeed; then StopJob of the victim's worker job must be acknowledged, "+
		"its process gone and JobById without the instance within %s, and StartJob acknowledged with a new process alive within %s. "+
		"A round stops at the first call that does not pass. "+
		"**Every manager answers consistently** from the end of the first round of the final run of passing rounds (every later round passed; "+
		"the run includes %d rounds begun after the rejoin). "+
		"**The thawed manager serves** when its health answers SERVING and its own Cluster/Status names the leader all three name "+
		"(polled every %s, a sample counted at its end; \"for good\": the start of the streak of such samples that lasts until the cluster is stable again after the trial); "+
		"it has **caught up** when its status shows it applied what the leader had applied at SIGCONT. "+
		"Rejoin times are the `time` of the victim's log lines \"%s\" (decided) and \"%s\". "+
		"**A false answer** is any answer other than the right one, no answer (UNAVAILABLE, DEADLINE_EXCEEDED: outcome unknown) or ABORTED (nothing done), "+
		"unless an earlier call of unknown outcome explains it; an acknowledged StopJob or StartJob without its effect counts as one.\n\n",
		freezeCallTimeout, stopEffectTimeout, startEffectTimeout, freezeSettleRounds, pollEvery, logRejoinDecided, logRejoined)

	var serveFirst, serveGood, caught, decided, rejoined, probes, first, good, rounds durs
	for _, t := range trials {
		serveFirst.add(t.serveFirst, t.serveFirstOK)
		serveGood.add(t.serveGood, t.serveOK)
		caught.add(t.caughtUp, t.caughtOK)
		decided.add(t.rejoinDecided, t.rejoinOK && t.rejoinDecided > 0)
		rejoined.add(t.rejoined, t.rejoinOK)
		probes.add(t.probesAt, t.probesOK)
		first.add(t.firstAt, t.firstOK)
		good.add(t.goodAt, t.goodOK)
		for _, d := range t.roundTimes {
			rounds.add(d, true)
		}
	}
	fmt.Fprintln(out, latencyHeader)
	serveFirst.row(e, "SIGCONT → the thawed manager SERVING (first sample)")
	serveGood.row(e, "SIGCONT → the thawed manager SERVING for good")
	caught.row(e, "SIGCONT → the thawed manager applied what the leader had applied at SIGCONT")
	decided.row(e, "SIGCONT → rejoin decided (logged)")
	rejoined.row(e, "SIGCONT → rejoined the actor cluster (logged)")
	probes.row(e, "SIGCONT → probe jobs answered consistently through every manager (first round)")
	first.row(e, "SIGCONT → first fully consistent round (probes + StopJob/StartJob through the thawed manager in effect)")
	good.row(e, "**SIGCONT → every manager answers consistently, for good**")
	rounds.row(e, "a passing round after SIGCONT (trials column: rounds)")
	fmt.Fprintln(out)

	fmt.Fprintln(out, "| trial | victim (roles) | leader before → after | frozen s | SERVING ms first / for good | caught up ms | rejoined ms | its node grain passivated ms (logged) | consistent ms first / for good | rounds after SIGCONT passed / run | rounds during the freeze passed / run | false answers after SIGCONT |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for i, t := range trials {
		nFalse := t.falseAfter(s.fc)
		fmt.Fprintf(out, "| %d | %s (%s) | %s → %s | %.1f | %s / %s | %s | %s | %s | %s / %s | %d / %d | %d / %d | %d |\n", i+1, t.victim, t.role,
			t.leaderBefore, orDash(t.leaderAt), t.frozen.Seconds(), msOrDash(t.serveFirst, t.serveFirstOK), msOrDash(t.serveGood, t.serveOK), msOrDash(t.caughtUp, t.caughtOK),
			msOrDash(t.rejoined, t.rejoinOK), msOrDash(t.passivated, t.passivatedOK), msOrDash(t.firstAt, t.firstOK), msOrDash(t.goodAt, t.goodOK),
			t.passed, t.rounds, t.duringPassed, t.duringRounds, nFalse)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Per-trial SIGCONT → consistent for good (ms): %s. The run took %s.\n\n", good.perTrial(), took.Round(time.Second))
	printFreezeCalls(e, s.fc)
	printFreezeNotes(e, s.fc, trials)
}

// falseAfter counts the false answers after SIGCONT in the trial.
func (t freezeTrial) falseAfter(fc *freezeCheck) int {
	n := 0
	for _, f := range fc.falses[t.falseFrom:t.falseTo] {
		if f.phase == "after" {
			n++
		}
	}
	return n
}

// printFreezeCalls prints the answers by phase.
func printFreezeCalls(e *env, fc *freezeCheck) {
	out := e.out
	fmt.Fprintln(out, "| phase | calls | no answer (outcome unknown) | ABORTED | explained by an unknown outcome | false answers |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, ph := range []struct{ name, label string }{
		{"before", "before each freeze (all three)"}, {"during", "during the freezes (the survivors)"}, {"after", "after SIGCONT (all three)"},
	} {
		c := fc.counts[ph.name]
		if c == nil {
			c = &callCounts{}
		}
		fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d |\n", ph.label, c.calls, c.noAnswer, c.nothing, c.explained, c.falses)
	}
	fmt.Fprintln(out)
}

// printFreezeNotes lists the false answers and what else a trial showed,
// and the verdicts.
func printFreezeNotes(e *env, fc *freezeCheck, trials []freezeTrial) {
	out := e.out
	if len(fc.falses) > 0 {
		fmt.Fprintln(out, "False answers:")
		fmt.Fprintln(out)
		for i, t := range trials {
			for _, f := range fc.falses[t.falseFrom:t.falseTo] {
				ref := "SIGCONT"
				if f.phase == "during" {
					ref = "SIGSTOP"
				} else if f.phase == "before" {
					ref = "the trial's first round"
				}
				fmt.Fprintf(out, "- trial %d, %s, %s ms after %s: %s\n", i+1, f.phase, fmtMs(ms(f.at)), ref, f.what)
			}
		}
		fmt.Fprintln(out)
	}
	rejoinedAll, falseAfter, others, jobs := true, 0, []string{}, []string{}
	for i, t := range trials {
		rejoinedAll = rejoinedAll && t.rejoinOK
		falseAfter += t.falseAfter(fc)
		if len(t.otherRejoins) > 0 {
			others = append(others, fmt.Sprintf("trial %d: %s", i+1, strings.Join(t.otherRejoins, ", ")))
		}
		if t.rejoins > 1 {
			others = append(others, fmt.Sprintf("trial %d: the victim rejoined %d times", i+1, t.rejoins))
		}
		if t.jobsNote != "" {
			jobs = append(jobs, fmt.Sprintf("trial %d: %s", i+1, t.jobsNote))
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(out, "Rejoins other than the victim's one: %s.\n", strings.Join(others, "; "))
	} else {
		fmt.Fprintln(out, "Only the victim rejoined, once per trial.")
	}
	var downs, late []string
	for i, t := range trials {
		if t.serveDowns > 0 {
			downs = append(downs, fmt.Sprintf("trial %d (%d times)", i+1, t.serveDowns))
		}
		if t.lateStart > 100*time.Millisecond {
			late = append(late, fmt.Sprintf("trial %d (%s ms)", i+1, fmtMs(ms(t.lateStart))))
		}
	}
	if len(late) > 0 {
		fmt.Fprintf(out, "The first round after SIGCONT started late (the client was still finishing a call through the survivors) in %s; the times from SIGCONT include that.\n", strings.Join(late, ", "))
	}
	if len(downs) > 0 {
		fmt.Fprintf(out, "The thawed manager stopped serving again after its first serving sample in %s.\n", strings.Join(downs, ", "))
	}
	if len(jobs) > 0 {
		fmt.Fprintf(out, "**Worker jobs not commanded in a trial that lost their process: %s.**\n", strings.Join(jobs, "; "))
	} else {
		fmt.Fprintln(out, "The worker jobs not commanded in a trial kept their processes (same pid, alive) through it.")
	}
	var sessions []string
	for _, t := range trials {
		sessions = append(sessions, orDash(t.sessionAt))
	}
	fmt.Fprintf(out, "Session holder after each trial (settled): %s.\n\n", strings.Join(sessions, ", "))
	fmt.Fprintf(out, "Required: no false answer after SIGCONT (%d), every acknowledged StopJob/StartJob in effect, the thawed manager rejoined in every trial: %s\n\n",
		falseAfter, met(falseAfter == 0 && rejoinedAll))
}

func msOrDash(d time.Duration, ok bool) string {
	if !ok {
		return "–"
	}
	return fmtMs(ms(d))
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// freezeFalseNote lists the false answers of a trial that did not finish.
func freezeFalseNote(fs []falseAnswer) string {
	if len(fs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " False answers of that trial (%d):", len(fs))
	for _, f := range fs {
		fmt.Fprintf(&b, "\n- %s, %s ms: %s", f.phase, fmtMs(ms(f.at)), f.what)
	}
	return b.String()
}
