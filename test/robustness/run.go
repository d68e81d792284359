package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// Config configures a run.
type Config struct {
	// Managers is the cluster size. Default 3.
	Managers int
	// Clients is the number of workload clients, bound round-robin to the
	// managers (client i to manager i mod Managers). Default 6.
	Clients int
	// Jobs is the number of jobs the clients share. Default 5.
	Jobs int
	// Warmup is the traffic before the first fault (so that every job
	// exists and has grain activations). Default 6 s.
	Warmup time.Duration
	// Schedule is the nemesis's actions, carried out one after another.
	// Partition actions are left out (with a log line) when partitions
	// are unavailable (FirewallUnavailable).
	Schedule []Action
	// Partitions runs the managers under their own uids (from UIDBase)
	// behind a testproc.Firewall, as Partition actions need. Ignored
	// (with a log line) when the firewall is unavailable.
	Partitions bool
	// UIDBase is the first uid of the managers with Partitions. Default
	// 62001 (test/ha uses 61001…: both can run at once).
	UIDBase int
	// CallTimeout is each call's deadline. Default 5 s.
	CallTimeout time.Duration
	// Think bounds the random pause of a client between calls. Default
	// 20 ms.
	Think time.Duration
	// Mix is the workload's mix. Default DefaultMix.
	Mix Mix
	// Seed makes the clients' choices and the nemesis's targets
	// reproducible. 0: random (reported).
	Seed uint64
	// RecoveryBound bounds how long, after the last fault healed, each
	// manager may take to acknowledge an UpdateJob of every job. Default
	// 30 s.
	RecoveryBound time.Duration
	// CheckTimeout bounds porcupine's check. Default 2 min.
	CheckTimeout time.Duration
	// OutDir receives the visualisation and the history when the check
	// fails. Empty: nothing is written.
	OutDir string
	// Logf prints progress; nil: t.Logf.
	Logf func(format string, args ...any)
}

func (c *Config) defaults(t testing.TB) {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.Managers, 3)
	def(&c.Clients, 6)
	def(&c.Jobs, 5)
	def(&c.UIDBase, 62001)
	defD(&c.Warmup, 6*time.Second)
	defD(&c.CallTimeout, 5*time.Second)
	defD(&c.Think, 20*time.Millisecond)
	defD(&c.RecoveryBound, 30*time.Second)
	defD(&c.CheckTimeout, 2*time.Minute)
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Logf == nil {
		c.Logf = t.Logf
	}
}

// Run starts a cluster, runs the workload through the schedule, heals,
// probes every manager with an UpdateJob of every job, reads every job
// through every manager and checks the history. Call it from the
// goroutine running the test: it fails the test only for a broken setup
// (a manager that does not start or serve); the verdict is in the
// Report. The error is ctx's (the run was interrupted) or the failure to
// write the visualisation.
func Run(ctx context.Context, t testing.TB, cfg Config) (*Report, error) {
	t.Helper()
	cfg.defaults(t)
	rep := &Report{Seed: cfg.Seed, Counts: map[string]*Counts{}}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65))

	c := testproc.NewCluster(t, cfg.Managers)
	fw, uids := setupPartitions(t, &cfg, c)
	c.StartAll()
	cfg.Logf("robustness: %d managers serving; seed %d; %d clients on %d jobs; schedule: %d actions", cfg.Managers, cfg.Seed, cfg.Clients, cfg.Jobs, len(cfg.Schedule))

	rec := NewRecorder()
	keys := make([]string, cfg.Jobs)
	for i := range keys {
		keys[i] = fmt.Sprintf("rb-%d", i+1)
	}
	var callers []*Caller
	for i := range cfg.Clients {
		m := c.Managers[i%len(c.Managers)]
		cl, err := Dial(i, m.Name, m.APIAddr, rec, cfg.CallTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		callers = append(callers, cl)
	}
	w := StartWorkload(callers, keys, cfg.Mix, cfg.Think, cfg.Seed)
	err := runSchedule(ctx, t, cfg, c, fw, uids, rec, rng)
	w.Stop()
	rep.Traffic = rec.Now()
	rep.Faults = rec.Faults()
	if err != nil {
		return rep, err
	}
	for _, m := range c.Managers {
		m.WaitServing(2 * time.Minute)
	}
	var lastHeal time.Duration
	if n := len(rep.Faults); n > 0 {
		lastHeal = rep.Faults[n-1].End
	}
	cfg.Logf("robustness: traffic stopped after %s; probing every manager with UpdateJob", rep.Traffic.Round(time.Second))
	rep.Recovery = probeRecovery(t, c, keys, rec, cfg, lastHeal)
	final := finalReads(t, c, keys, rec, cfg)
	rep.Diverged = diverged(final, keys)
	ops := rec.Ops()
	rep.LostWrites = lostWrites(ops, final)
	rep.count(ops)
	cfg.Logf("robustness: checking %d operations with porcupine", len(ops))
	rep.Check, err = Check(ops, rep.Faults, cfg.CheckTimeout, cfg.OutDir)
	return rep, err
}

// setupPartitions prepares the firewall and the managers' uids when
// cfg.Partitions asks for them and they are available, and otherwise
// drops the schedule's Partition actions.
func setupPartitions(t testing.TB, cfg *Config, c *testproc.Cluster) (*testproc.Firewall, map[string]int) {
	reason := "not asked for"
	if cfg.Partitions {
		reason = testproc.FirewallUnavailable()
	}
	if reason == "" {
		fw := testproc.NewFirewall(t)
		uids := map[string]int{}
		for i, m := range c.Managers {
			uids[m.Name] = cfg.UIDBase + i
			testproc.RunAs(t, m, uids[m.Name])
		}
		return fw, uids
	}
	var kept []Action
	for _, a := range cfg.Schedule {
		if a.Kind != Partition {
			kept = append(kept, a)
		}
	}
	if len(kept) < len(cfg.Schedule) {
		cfg.Logf("robustness: leaving out %d partition actions: %s", len(cfg.Schedule)-len(kept), reason)
	}
	cfg.Schedule = kept
	return nil, nil
}

func runSchedule(ctx context.Context, t testing.TB, cfg Config, c *testproc.Cluster, fw *testproc.Firewall,
	uids map[string]int, rec *Recorder, rng *rand.Rand) error {
	if err := sleepCtx(ctx, cfg.Warmup); err != nil {
		return err
	}
	n := NewNemesis(t, c, fw, uids, rec, rng, cfg.Logf)
	for i, a := range cfg.Schedule {
		f, err := n.Do(ctx, a)
		if err != nil {
			return err
		}
		cfg.Logf("robustness: [%d/%d] %s healed at %s; %d operations so far", i+1, len(cfg.Schedule), f.Desc,
			f.End.Round(time.Millisecond), len(rec.Ops()))
	}
	return nil
}

// Report is the outcome of a run.
type Report struct {
	Seed uint64
	// Traffic is how long the workload ran.
	Traffic time.Duration
	Faults  []Fault
	// Counts counts the operations per manager.
	Counts map[string]*Counts
	// Recovery is, per manager, when it had acknowledged a write of every
	// job after the last heal (from the start without faults).
	Recovery []Recovery
	// Diverged lists jobs whose final reads differ between managers.
	Diverged []string
	// LostWrites lists acknowledged writes the final state lost.
	LostWrites []string
	Check      CheckResult
}

// Counts counts operations by outcome.
type Counts struct {
	OK, Refused, Unknown int
	// StaleHash counts UpdateJob refusals for a stale current_hash.
	StaleHash int
}

// Recovery is how one manager did after the last heal.
type Recovery struct {
	Manager string
	// After is when it had acknowledged an UpdateJob (or CreateJob, for
	// a deleted job) of every job, through the workload or the probe,
	// counted from the last heal; 0 if it did not within the bound.
	After time.Duration
	// Failed names the jobs it did not accept a write of, with its last
	// answer.
	Failed []string
}

// OK reports whether the run found nothing wrong (and the check
// finished).
func (r *Report) OK() bool {
	if r.Check.Result != porcupine.Ok || len(r.Diverged) > 0 || len(r.LostWrites) > 0 {
		return false
	}
	for _, rc := range r.Recovery {
		if len(rc.Failed) > 0 {
			return false
		}
	}
	return true
}

func (r *Report) count(ops []Op) {
	for _, op := range ops {
		c := r.Counts[op.Manager]
		if c == nil {
			c = &Counts{}
			r.Counts[op.Manager] = c
		}
		switch op.Output.Outcome {
		case OK:
			c.OK++
		case Refused:
			c.Refused++
			if op.Output.Claim == ClaimStaleHash {
				c.StaleHash++
			}
		case Unknown:
			c.Unknown++
		}
	}
}
