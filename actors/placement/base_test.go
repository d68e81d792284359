package placement

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/btree"
	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
)

// baseSummary is everything a pass reads from b at now, as text: the
// roles to place, the moves, where every role is, what is placed, the
// room free on every node, the sets the gated scans use, and every
// instance the engine may stop.
func baseSummary(b *base, now time.Time) string {
	w := b.world(now)
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, c := range w.candidates {
		add("cand %s seq=%d pool=%s replica=%d", c.key, c.seq, c.pool, c.replica)
	}
	for _, m := range w.moves {
		add("move %s %s→%s seq=%d", m.rec.GetJob().GetJob().GetJobId().GetJobId(), m.m.GetSourceRole(), m.m.GetTargetRole(), m.seq)
	}
	for k, n := range b.where {
		add("where %s=%s", k, n)
	}
	for k, p := range b.placed {
		add("placed %s on %s cap=%g cores=%v", k, p.Node, p.Capacity, p.Cores)
	}
	for n, c := range b.perNode {
		add("busy %s=%d", n, c)
	}
	for _, n := range b.nodes {
		c, g, cores, _ := b.view.Free(n.ID)
		add("node %s online=%v free=%g/%g/%d", n.ID, n.Online, c, g, cores)
	}
	add("draining %d", b.draining)
	for name, set := range map[string]*btree.BTreeG[string]{"cands": b.cands, "moving": b.moving, "noted": b.noted, "rolling": b.rolling, "dormant": b.dormant} {
		set.Ascend(func(id string) bool { add("set %s %s", name, id); return true })
	}
	for _, r := range b.allRunning() {
		add("running %s on %s status=%v seq=%d dormant=%v", r.key, r.node, r.status, r.seq, r.js.GetDormant())
	}
	for id := range b.jobs {
		add("job %s", id)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestView_RollbackRestoresExactly: after Begin, any Adds and Removes
// (of recorded instances, of new ones, twice over) are undone by Rollback
// to the last bit of every node's room, so a pass leaves the engine's
// view as it found it.
func TestView_RollbackRestoresExactly(t *testing.T) {
	nodes := []scheduler.Node{{ID: "a", Capacity: 1, Cores: []int{0, 1, 2}}, {ID: "b", Capacity: 1}}
	placed := []scheduler.Placed{{Job: "j1", Role: "primary", Node: "a", Capacity: 0.1, Cores: []int{1}},
		{Job: "j2", Role: "primary", Node: "a", Capacity: 0.2}}
	v, err := scheduler.NewView(nodes, placed)
	require.NoError(t, err)
	free := func() string {
		var out []string
		for _, n := range []scheduler.NodeID{"a", "b"} {
			c, g, cores, _ := v.Free(n)
			out = append(out, fmt.Sprintf("%s %v %v %d", n, c, g, cores))
		}
		return strings.Join(out, ",")
	}
	before := free()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		v.Begin()
		for range 20 {
			job := scheduler.JobID(fmt.Sprintf("j%d", rng.IntN(4)))
			if rng.IntN(2) == 0 {
				v.Add(scheduler.Placed{Job: job, Role: "primary", Node: []scheduler.NodeID{"a", "b", "gone"}[rng.IntN(3)],
					Capacity: 0.1 * float64(rng.IntN(5)), Cores: []int{rng.IntN(3)}})
			} else {
				v.Remove(job, "primary")
			}
		}
		v.Rollback()
		require.Equal(t, before, free())
	}
}
