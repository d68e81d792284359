package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/test/robustness"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// runRobustness is the long form of test/robustness's CI run: a cluster
// of three managers (--cluster-timings local, as the suite's testproc
// clusters run), --robustness-clients clients on --robustness-jobs jobs,
// and a random nemesis schedule (robustness.RandomSchedule, from --seed)
// of kills, freezes and — as root with iptables, unless
// --robustness-partitions=false — partitions, whose faults and gaps add
// up to --duration. It prints progress, then the verdict with what was
// done, and fails (exit 1) when the history is not linearizable or an
// invariant does not hold; the visualisation and the history are then in
// --robustness-out.
func runRobustness(ctx context.Context, e *env) error {
	seed := e.rbSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	schedule := robustness.RandomSchedule(rand.New(rand.NewPCG(seed, 1)), e.rbDuration, e.rbPartitions)
	out := e.rbOut
	if out == "" {
		out = filepath.Join(os.TempDir(), fmt.Sprintf("norsk-robustness-%s-%d", time.Now().Format("20060102-150405"), seed))
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(e.out, "    %6s  %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	logFile, err := os.Create(filepath.Join(e.scratch, "robustness.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	st, err := robustness.NewStandalone("robustness", logFile)
	if err != nil {
		return err
	}
	defer testproc.RemoveBin()
	defer st.Close(e.keep)

	fmt.Fprintf(e.out, "Seed %d: %d actions over %s; managers' logs in %s (kept with --keep).\n\n", seed, len(schedule), e.rbDuration, st.Dir())
	var rep *robustness.Report
	var runErr error
	err = st.Do(func(t testing.TB) {
		rep, runErr = robustness.Run(ctx, t, robustness.Config{
			Clients: e.rbClients, Jobs: e.rbJobs, Schedule: schedule, Partitions: e.rbPartitions,
			Seed: seed, OutDir: out, Logf: logf,
		})
	})
	if err == nil {
		err = runErr
	}
	if rep != nil {
		fmt.Fprintf(e.out, "\n```\n%s```\n\n", rep.Summary())
		printRobustnessRow(e, rep)
	}
	switch {
	case err != nil:
		return err
	case !rep.OK():
		return errors.New("the run found a violation (above)")
	}
	return nil
}

// printRobustnessRow prints the run as a row for docs/benchmarks.md.
func printRobustnessRow(e *env, rep *robustness.Report) {
	var ops, unknown int
	for _, c := range rep.Counts {
		ops += c.OK + c.Refused + c.Unknown
		unknown += c.Unknown
	}
	var slowest time.Duration
	recovered := true
	for _, r := range rep.Recovery {
		slowest = max(slowest, r.After)
		recovered = recovered && len(r.Failed) == 0
	}
	recovery := slowest.Round(time.Millisecond).String()
	if !recovered {
		recovery = "not every manager within the bound"
	}
	verdict := "pass"
	if !rep.OK() {
		verdict = fmt.Sprintf("**fail** (%d jobs not linearizable)", len(rep.Check.Violations))
	}
	fmt.Fprintln(e.out, "| seed | traffic | faults | operations | unknown | porcupine | check took | slowest manager to accept writes after the last heal | verdict |")
	fmt.Fprintln(e.out, "|---|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(e.out, "| %d | %s | %d | %d | %d | %s | %s | %s | %s |\n\n", rep.Seed, rep.Traffic.Round(time.Second), len(rep.Faults),
		ops, unknown, rep.Check.Result, rep.Check.Took.Round(time.Millisecond), recovery, verdict)
}
