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
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
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

// TestBase_IncrementalMatchesWholeRead: the engine's base, brought up to
// date pass after pass with only what changed, reads the same world as a
// base read whole from the same World, after every one of a few hundred
// random changes of jobs (placed, moved, failed, completed, scheduled,
// deleted), nodes (drained, lost, back), pools, bundles (dormant jobs) and
// the clock. Decisions are made from that world, so they cannot differ.
func TestBase_IncrementalMatchesWholeRead(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			f := newFixture(t)
			rng := rand.New(rand.NewPCG(seed, 22))
			inc := newBase()
			nodes := []string{"n1", "n2", "n3", "n4"}
			for _, n := range nodes {
				f.putNode(n, 4, "z"+n, nil)
			}
			f.putPool("p", 5, 600)
			jobID := func() string { return fmt.Sprintf("j%02d", rng.IntN(30)) }
			live := func(id string) (*internalpb.JobRecord, bool) {
				var rec *internalpb.JobRecord
				err := f.store.View(func(r *persistence.Reader) error {
					var err error
					rec, _, err = r.Job(id)
					return err
				})
				return rec, err == nil
			}
			for step := range 300 {
				switch op := rng.IntN(13); op {
				case 0, 1, 2: // a job created or rewritten
					id := jobID()
					rec := autoJob(id, float64(rng.IntN(3))+0.5, nil)
					if rng.IntN(3) == 0 {
						rec.Job.Job.Tags = map[string]string{persistence.PoolTag: "p"}
					}
					switch rng.IntN(6) {
					case 0:
						rec.Job.Job.State = managerpb.Job_PRE
						rec.Job.Job.StartDateTime = timestamppb.New(f.now.Add(time.Duration(rng.IntN(120)) * time.Second))
					case 1:
						rec.Job.Job.State = managerpb.Job_POST
					case 2:
						rec.Job.Job.TerminalState = &managerpb.TerminalState{FailureReason: "ceiling"}
					case 3:
						rec.Job.Job.AutoPlacement = nil
					}
					if rng.IntN(2) == 0 {
						n := nodes[rng.IntN(len(nodes))]
						rec.Instances = append(rec.Instances, &internalpb.Instance{Role: "primary", NodeId: n,
							NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: n}},
							Status:       internalpb.InstanceStatus(rng.IntN(4)), CpuList: []uint32{uint32(rng.IntN(4))}})
						if rng.IntN(3) == 0 {
							rec.Instances = append(rec.Instances, &internalpb.Instance{Role: "primary~1", NodeId: nodes[rng.IntN(len(nodes))],
								Status: internalpb.InstanceStatus_INSTANCE_RUNNING})
							rec.Migrations = []*managerpb.Migration{{SourceRole: "primary", TargetRole: "primary~1"}}
						}
					}
					f.putJob(rec)
				case 3: // a job deleted
					id := jobID()
					if _, ok := live(id); ok {
						seq, err := f.store.Seq(persistence.JobKey(id))
						require.NoError(t, err)
						_, err = f.log.Append(t.Context(), persistence.JobKey(id), seq, persistence.Change{Delete: true})
						require.NoError(t, err)
					}
				case 4: // a node drained, cordoned or back
					n := nodes[rng.IntN(len(nodes))]
					f.setScheduling(n, managerpb.NodeScheduling(rng.IntN(3)))
				case 5: // a node lost or back
					n := nodes[rng.IntN(len(nodes))]
					if rng.IntN(2) == 0 {
						f.put(persistence.NodeKey(n), &internalpb.NodeRecord{NodeId: n, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
							State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, Resources: &commonpb.NodeResources{Capacity: 4, Zone: "z" + n}})
					} else {
						f.putNode(n, float64(2+rng.IntN(4)), "z"+n, nil)
					}
				case 6: // the pool's disconnect policy changes
					rep := managerpb.PoolDisconnect_REPLACE_IMMEDIATELY
					if rng.IntN(2) == 0 {
						rep = managerpb.PoolDisconnect_REPLACE_WAIT
					}
					f.put(persistence.PlacementPoolKey("p"), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: "p",
						Disconnect: &managerpb.PoolDisconnect{Replace: rep}}})
				case 7: // a bundle (re)written, some jobs dormant
					b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, Pool: "p",
						ResiliencePolicy: &managerpb.ResiliencePolicy{},
						Jobs:             []*managerpb.BundleJobSpec{{JobName: "enc", Job: autoJob("x", 1, nil).GetJob().GetJob()}}}
					f.putBundle(b, map[string]bool{"enc": rng.IntN(2) == 0})
				case 8: // a derived job placed
					id := bundle.JobID("b", uint32(rng.IntN(2)), "enc")
					if rec, ok := live(id); ok {
						rec.Instances = []*internalpb.Instance{{Role: []string{"primary", "backup"}[rng.IntN(2)], NodeId: nodes[rng.IntN(len(nodes))],
							Status:    internalpb.InstanceStatus_INSTANCE_RUNNING,
							Placement: &internalpb.PlacementNote{Degradation: managerpb.PlacementDegraded_State(rng.IntN(2))}}}
						f.putJob(rec)
					}
				case 9: // a job's node lost under it (the lost-node wait)
					id := jobID()
					if rec, ok := live(id); ok && len(rec.GetInstances()) > 0 {
						f.endInstance(rec, rec.GetInstances()[0].GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED, "")
					}
				case 10: // the bundle record alone changes: a job dormant or not
					var rec *internalpb.BundleRecord
					if f.store.View(func(r *persistence.Reader) error {
						var err error
						rec, _, err = r.Bundle("b")
						return err
					}) == nil {
						for _, js := range rec.GetJobs() {
							js.Dormant = rng.IntN(2) == 0
						}
						if rng.IntN(4) == 0 {
							rec.Bundle.State = managerpb.BundleState_BUNDLE_STATE_DELETING
						}
						f.put(persistence.BundleKey("b"), rec)
					}
				default: // time passes
					f.now = f.now.Add(time.Duration(rng.IntN(40)) * time.Second)
				}
				require.NoError(t, inc.update(f.store.World(), f.now), "step %d", step)
				whole := newBase()
				require.NoError(t, whole.update(f.store.World(), f.now))
				require.Equal(t, baseSummary(whole, f.now), baseSummary(inc, f.now), "step %d", step)
			}
		})
	}
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
