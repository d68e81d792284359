package robustness

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// probeRecovery asks every manager, in parallel, to write every job (read
// it, then UpdateJob from the hash read, or CreateJob if it is absent),
// retrying each job until it is acknowledged or cfg.RecoveryBound has
// passed. The probes' calls are part of the history (clients Clients…).
// Each manager's Recovery.After is taken from the whole history: when it
// had acknowledged a write of every job, counted from the last heal.
func probeRecovery(t testing.TB, c *testproc.Cluster, keys []string, rec *Recorder, cfg Config, lastHeal time.Duration) []Recovery {
	t.Helper()
	out := make([]Recovery, len(c.Managers))
	var wg sync.WaitGroup
	for i, m := range c.Managers {
		cl, err := Dial(cfg.Clients+i, m.Name, m.APIAddr, rec, cfg.CallTimeout)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			out[i] = probe(cl, keys, rec, cfg.RecoveryBound)
		}()
	}
	wg.Wait()
	ops := rec.Ops()
	for i := range out {
		r := &out[i]
		if len(r.Failed) == 0 {
			r.After = acceptedAll(ops, r.Manager, keys, lastHeal)
			cfg.Logf("robustness: %s had acknowledged a write of every job %s after the last heal", r.Manager, r.After.Round(time.Millisecond))
		} else {
			cfg.Logf("robustness: %s did not acknowledge a write of %d jobs within %s: %s", r.Manager, len(r.Failed), cfg.RecoveryBound, strings.Join(r.Failed, "; "))
		}
	}
	return out
}

// acceptedAll returns when, after since, the manager had acknowledged a
// create or update of every job, counted from since.
func acceptedAll(ops []Op, manager string, keys []string, since time.Duration) time.Duration {
	first := map[string]time.Duration{}
	for _, op := range ops {
		if op.Manager != manager || op.Call < since || op.Output.Outcome != OK || (op.Input.Kind != Create && op.Input.Kind != Update) {
			continue
		}
		if t, ok := first[op.Input.Key]; !ok || op.Return < t {
			first[op.Input.Key] = op.Return
		}
	}
	var all time.Duration
	for _, k := range keys {
		all = max(all, first[k]-since)
	}
	return all
}

// probe tries the jobs round-robin, one read and write each per round,
// until every job took a write or bound has passed.
func probe(cl *Caller, keys []string, rec *Recorder, bound time.Duration) Recovery {
	r := Recovery{Manager: cl.Manager}
	deadline := rec.Now() + bound
	last := map[string]string{}
	pending := append([]string(nil), keys...)
	for len(pending) > 0 && rec.Now() < deadline {
		var still []string
		for _, key := range pending {
			op := cl.Read(key)
			if op.Output.Outcome == OK {
				if op.Output.Found {
					op = cl.Update(key, op.Output.Hash)
				} else {
					op = cl.Create(key)
				}
			}
			if op.Output.Outcome == OK && op.Input.Kind != Read {
				continue
			}
			last[key] = describe(op.Input, op.Output)
			if op.Output.Message != "" {
				last[key] += ": " + op.Output.Message
			}
			still = append(still, key)
		}
		if pending = still; len(pending) > 0 {
			time.Sleep(100 * time.Millisecond) // a client's pause before retrying, not synchronisation
		}
	}
	for _, key := range pending {
		r.Failed = append(r.Failed, fmt.Sprintf("%s (last answer: %s)", key, last[key]))
	}
	return r
}

// finalRead is one manager's final answer about one job.
type finalRead struct {
	manager string
	op      Op
	ok      bool // false: no definite answer within the bound
}

// finalReads reads every job through every manager (retrying until the
// answer is definite, for up to 30 s): the last operations of the
// history, after every write.
func finalReads(t testing.TB, c *testproc.Cluster, keys []string, rec *Recorder, cfg Config) map[string][]finalRead {
	t.Helper()
	out := map[string][]finalRead{}
	for i, m := range c.Managers {
		cl, err := Dial(cfg.Clients+len(c.Managers)+i, m.Name, m.APIAddr, rec, cfg.CallTimeout)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			fr := finalRead{manager: m.Name}
			for deadline := rec.Now() + 30*time.Second; rec.Now() < deadline; {
				if fr.op = cl.Read(key); fr.op.Output.Outcome == OK {
					fr.ok = true
					break
				}
				time.Sleep(100 * time.Millisecond) // a client's pause before retrying
			}
			out[key] = append(out[key], fr)
		}
		cl.Close()
	}
	return out
}

// diverged lists the jobs whose final reads are not the same on every
// manager (or that a manager could not read).
func diverged(final map[string][]finalRead, keys []string) []string {
	var out []string
	for _, key := range keys {
		frs := final[key]
		var seen []string
		same := true
		for _, fr := range frs {
			s := "no answer"
			if fr.ok {
				s = describe(fr.op.Input, fr.op.Output)
			}
			seen = append(seen, fr.manager+": "+s)
			a, b := fr.op.Output, frs[0].op.Output
			if !fr.ok || a.Found != b.Found || a.Hash != b.Hash || a.Payload != b.Payload {
				same = false
			}
		}
		if !same {
			out = append(out, fmt.Sprintf("job %s: %s", key, strings.Join(seen, ", ")))
		}
	}
	return out
}

// lostWrites checks, per job, that the final state (the first manager's
// final read) comes from the last acknowledged write or from a write that
// may have taken effect after it: one concurrent with it or later, or an
// Unknown one. porcupine checks this too; this names the lost write.
func lostWrites(ops []Op, final map[string][]finalRead) []string {
	byKey := map[string][]Op{}
	for _, op := range ops {
		if op.Input.Kind != Read && op.Output.Outcome != Refused {
			byKey[op.Input.Key] = append(byKey[op.Input.Key], op)
		}
	}
	var out []string
	keys := make([]string, 0, len(final))
	for k := range final {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		frs := final[key]
		if len(frs) == 0 || !frs[0].ok {
			continue
		}
		got := frs[0].op.Output
		var last *Op
		for i, op := range byKey[key] {
			if op.Output.Outcome == OK && (last == nil || op.Return > last.Return) {
				last = &byKey[key][i]
			}
		}
		if last == nil {
			continue
		}
		explained := false
		for _, op := range byKey[key] {
			if op.Output.Outcome == Unknown || op.Return >= last.Call {
				if got.Found && op.Input.Kind != Delete && op.Input.Payload == got.Payload ||
					!got.Found && op.Input.Kind == Delete {
					explained = true
					break
				}
			}
		}
		if !explained {
			out = append(out, fmt.Sprintf("job %s: the acknowledged %s (%s, via %s, returned at %s) is lost: the final read through %s answers %s",
				key, describe(last.Input, last.Output), last.Input.Kind, last.Manager, last.Return.Round(time.Millisecond),
				frs[0].manager, describe(frs[0].op.Input, got)))
		}
	}
	return out
}

// FirstViolation returns the earliest Violation.At, if any.
func (r *Report) FirstViolation() (time.Duration, bool) {
	var first time.Duration
	for i, v := range r.Check.Violations {
		if i == 0 || v.At < first {
			first = v.At
		}
	}
	return first, len(r.Check.Violations) > 0
}

// sinceHeal says how long after the last heal before at it was.
func (r *Report) sinceHeal(at time.Duration) string {
	for i := len(r.Faults) - 1; i >= 0; i-- {
		if f := r.Faults[i]; f.End <= at {
			return fmt.Sprintf(", %s after the heal of %s", (at - f.End).Round(time.Millisecond), f.Desc)
		}
	}
	return ", before any fault healed"
}

// Summary is the report in a few lines: the verdict, the violations, the
// invariants, what was done and the files written.
func (r *Report) Summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%s: porcupine %s on %d operations (%d unknown writes: %d dropped unobserved, %d bounded by an observer) in %s; seed %d; %s of traffic\n",
		verdict, r.Check.Result, r.Check.Ops, r.Check.Stats.Unknown, r.Check.Stats.Dropped, r.Check.Stats.Bounded,
		r.Check.Took.Round(time.Millisecond), r.Seed, r.Traffic.Round(time.Second))
	for _, v := range r.Check.Violations {
		b.WriteString(v.String())
	}
	if at, ok := r.FirstViolation(); ok {
		fmt.Fprintf(&b, "  first violation at %s%s\n", at.Round(time.Millisecond), r.sinceHeal(at))
	}
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  fault %s at %s, healed at %s\n", f.Desc, f.Start.Round(time.Millisecond), f.End.Round(time.Millisecond))
	}
	names := make([]string, 0, len(r.Counts))
	for n := range r.Counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := r.Counts[n]
		fmt.Fprintf(&b, "  via %s: %d ok, %d refused (%d stale-hash), %d unknown\n", n, c.OK, c.Refused, c.StaleHash, c.Unknown)
	}
	for _, rc := range r.Recovery {
		if len(rc.Failed) > 0 {
			fmt.Fprintf(&b, "  RECOVERY: %s accepted no write of: %s\n", rc.Manager, strings.Join(rc.Failed, "; "))
		} else {
			fmt.Fprintf(&b, "  recovery: %s had acknowledged a write of every job %s after the last heal\n", rc.Manager, rc.After.Round(time.Millisecond))
		}
	}
	for _, d := range r.Diverged {
		fmt.Fprintf(&b, "  DIVERGED %s\n", d)
	}
	for _, l := range r.LostWrites {
		fmt.Fprintf(&b, "  LOST %s\n", l)
	}
	if r.Check.Visualization != "" {
		fmt.Fprintf(&b, "  visualisation: %s\n  history: %s\n", r.Check.Visualization, r.Check.HistoryFile)
	}
	return b.String()
}
