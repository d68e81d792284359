package placement

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// recordingRouter answers every command OK without carrying it out, and
// keeps them: two engines on one store then see the same records, and
// what they send is what they decided.
type recordingRouter struct {
	mu   sync.Mutex
	cmds []string
}

func (r *recordingRouter) Request(_ context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, kind+" "+id+" "+prototext.MarshalOptions{}.Format(cmd))
	return &internalpb.Reply{}, nil
}

func (r *recordingRouter) RequestFuture(string, string, proto.Message, time.Duration) *actor.Future {
	return nil
}

func (r *recordingRouter) Send(string, string, proto.Message) {}

// take returns the commands sent since the last take, sorted.
func (r *recordingRouter) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds = nil
	slices.Sort(out)
	return out
}

// requireWorldUntouched fails t if a record the World of store hands out
// differs from the stored one: its records are shared by every reader,
// and a pass must never modify one.
func requireWorldUntouched(t *testing.T, store *persistence.Store) {
	t.Helper()
	r, err := store.World().Read()
	require.NoError(t, err)
	require.NoError(t, store.View(func(sr *persistence.Reader) error {
		if err := r.PlacementJobs(func(rec *internalpb.JobRecord, _ persistence.Seq) error {
			stored, _, err := sr.Job(rec.GetJob().GetJob().GetJobId().GetJobId())
			require.NoError(t, err)
			require.True(t, proto.Equal(stored, rec), "job %s: the World's record was modified", rec.GetJob().GetJob().GetJobId().GetJobId())
			return nil
		}); err != nil {
			return err
		}
		if err := r.Nodes(func(rec *internalpb.NodeRecord, _ persistence.Seq) error {
			stored, _, err := sr.Node(rec.GetNodeId())
			require.NoError(t, err)
			require.True(t, proto.Equal(stored, rec), "node %s: the World's record was modified", rec.GetNodeId())
			return nil
		}); err != nil {
			return err
		}
		return r.PlacementPools(func(rec *internalpb.PoolRecord, _ persistence.Seq) error {
			stored, _, err := sr.PlacementPool(rec.GetPool().GetName())
			require.NoError(t, err)
			require.True(t, proto.Equal(stored, rec), "pool %s: the World's record was modified", rec.GetPool().GetName())
			return nil
		})
	}))
	if b, _, err := r.Bundle("b"); err == nil {
		require.NoError(t, store.View(func(sr *persistence.Reader) error {
			stored, _, err := sr.Bundle("b")
			require.NoError(t, err)
			require.True(t, proto.Equal(stored, b), "bundle b: the World's record was modified")
			return nil
		}))
	}
}

// TestBase_IncrementalDecidesAsWholeRead: two engines on one store, one
// keeping its base from pass to pass (the production engine), the other
// reading the World whole at every pass, send the same commands after
// every one of a few hundred random changes — plain and bundle jobs
// (two replicas, co_locate_with, separate_from, dormant), moves in every
// phase with their targets, drains with STOPPING instances, rolling-update
// jobs with stale instances, pinned cores and templates, priorities, jobs
// leaving the placement-relevant set and coming back, node and pool
// records deleted, and a snapshot restored mid-term — and their bases
// summarise alike. Neither engine's commands are carried out; the store
// changes only by the test's writes.
func TestBase_IncrementalDecidesAsWholeRead(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			f := newFixture(t)
			rng := rand.New(rand.NewPCG(seed, 2222))
			mk := func() (*Engine, *recordingRouter) {
				r := &recordingRouter{}
				cfg := DefaultConfig()
				cfg.Store, cfg.Router, cfg.Clock = f.store, r, func() time.Time { return f.now }
				e, err := New(cfg)
				require.NoError(t, err)
				return e, r
			}
			inc, incR := mk()
			whole, wholeR := mk()
			nodes := []string{"n1", "n2", "n3", "n4", "n5"}
			putNode := func(n string) {
				rec := &internalpb.NodeRecord{NodeId: n, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
					State:    managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
					Metadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: n}},
					Resources: &commonpb.NodeResources{Capacity: float64(1 + rng.IntN(3)), Zone: "z" + n[1:],
						Cores: []uint32{0, 1, 2, 3}}}
				if rng.IntN(2) == 0 {
					rec.Resources.Templates = []*commonpb.ProductTemplateOffer{{Name: "t", Versions: []string{"1"}}}
				}
				f.put(persistence.NodeKey(n), rec)
			}
			for _, n := range nodes {
				putNode(n)
			}
			f.putPool("p", 5, 600)
			jobID := func() string { return fmt.Sprintf("j%02d", rng.IntN(24)) }
			live := func(id string) (*internalpb.JobRecord, bool) {
				var rec *internalpb.JobRecord
				err := f.store.View(func(r *persistence.Reader) error {
					var err error
					rec, _, err = r.Job(id)
					return err
				})
				return rec, err == nil
			}
			instance := func(role, n string) *internalpb.Instance {
				in := &internalpb.Instance{Role: role, NodeId: n, InstanceId: fmt.Sprintf("i%d", rng.IntN(1000)),
					NodeMetadata:   &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: n}},
					Status:         []internalpb.InstanceStatus{internalpb.InstanceStatus_INSTANCE_RUNNING, internalpb.InstanceStatus_INSTANCE_RUNNING, internalpb.InstanceStatus_INSTANCE_STOPPING, internalpb.InstanceStatus_INSTANCE_PROVISIONING}[rng.IntN(4)],
					DefinitionHash: int64(6 + rng.IntN(2)), RunHash: int64(1 + rng.IntN(2))}
				if rng.IntN(3) == 0 {
					in.CpuList = []uint32{uint32(rng.IntN(4))}
				}
				return in
			}
			withMove := func(rec *internalpb.JobRecord, role string) {
				src := instanceOf(rec, role)
				if src == nil {
					return
				}
				target := role + "~1"
				tn := nodes[rng.IntN(len(nodes))]
				m := &managerpb.Migration{SourceRole: role, TargetRole: target, Move: 1, SourceNodeId: src.GetNodeId(),
					Phase: managerpb.Migration_Phase(1 + rng.IntN(3)), Why: managerpb.Migration_Why(rng.IntN(3)),
					StartedAt: timestamppb.New(f.now)}
				if rng.IntN(2) == 0 {
					m.TargetNodeId = tn
					rec.Instances = append(rec.Instances, instance(target, tn))
				}
				rec.Migrations = []*managerpb.Migration{m}
			}
			var snap []byte
			steps := 250
			for step := range steps {
				op := rng.IntN(17)
				switch op {
				case 0, 1, 2: // a plain job created or rewritten
					id := jobID()
					rec := autoJob(id, []float64{0.1, 0.2, 0.3, 0.7, 1.5, 2.5}[rng.IntN(6)], nil)
					req := rec.Job.Job.AutoPlacement.Requirements
					req.PriorityBand = []managerpb.PriorityBand{managerpb.PriorityBand_PRIORITY_BAND_STANDARD, managerpb.PriorityBand_PRIORITY_BAND_LOW,
						managerpb.PriorityBand_PRIORITY_BAND_LOW, managerpb.PriorityBand_PRIORITY_BAND_STANDARD, managerpb.PriorityBand_PRIORITY_BAND_HIGH}[rng.IntN(5)]
					if rng.IntN(4) == 0 {
						req.RequiredCores = &commonpb.OptionalInt{Value: 1}
					}
					if rng.IntN(4) == 0 {
						rec.Job.Job.ProductTemplate = &commonpb.ProductTemplateRef{Name: "t", Version: "1"}
					}
					if rng.IntN(3) == 0 {
						rec.Job.Job.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
					}
					if rng.IntN(3) == 0 {
						rec.Job.Job.Tags = map[string]string{persistence.PoolTag: "p"}
					}
					switch rng.IntN(7) {
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
						rec.Instances = append(rec.Instances, instance("primary", nodes[rng.IntN(len(nodes))]))
						if rng.IntN(3) == 0 {
							withMove(rec, "primary")
						}
					}
					f.putJob(rec)
				case 3: // a job deleted
					if _, ok := live(jobID()); ok {
						id := jobID()
						if _, ok := live(id); ok {
							seq, err := f.store.Seq(persistence.JobKey(id))
							require.NoError(t, err)
							_, err = f.log.Append(t.Context(), persistence.JobKey(id), seq, persistence.Change{Delete: true})
							require.NoError(t, err)
						}
					}
				case 4: // a node drained, cordoned or back
					n := nodes[rng.IntN(len(nodes))]
					if seq, _ := f.store.Seq(persistence.NodeKey(n)); seq > 0 {
						if _, err := f.store.Seq(persistence.NodeKey(n)); err == nil {
							var rec *internalpb.NodeRecord
							if f.store.View(func(r *persistence.Reader) error {
								var err error
								rec, _, err = r.Node(n)
								return err
							}) == nil {
								rec.Scheduling = &managerpb.NodeSchedulingState{State: managerpb.NodeScheduling(rng.IntN(3))}
								f.put(persistence.NodeKey(n), rec)
							}
						}
					}
				case 5: // a node lost, back, or its record deleted
					n := nodes[rng.IntN(len(nodes))]
					switch rng.IntN(3) {
					case 0:
						f.put(persistence.NodeKey(n), &internalpb.NodeRecord{NodeId: n, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
							State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, Resources: &commonpb.NodeResources{Capacity: 4, Zone: "z" + n[1:]}})
					case 1:
						putNode(n)
					default:
						var rec *internalpb.NodeRecord
						if f.store.View(func(r *persistence.Reader) error {
							var err error
							rec, _, err = r.Node(n)
							return err
						}) == nil && rec != nil {
							seq, err := f.store.Seq(persistence.NodeKey(n))
							require.NoError(t, err)
							_, err = f.log.Append(t.Context(), persistence.NodeKey(n), seq, persistence.Change{Delete: true})
							require.NoError(t, err)
						}
					}
				case 6: // the pool's policy changes, or the pool is deleted
					if rng.IntN(3) == 0 {
						if seq, err := f.store.Seq(persistence.PlacementPoolKey("p")); err == nil && seq > 0 {
							var exists bool
							_ = f.store.View(func(r *persistence.Reader) error {
								_, _, err := r.PlacementPool("p")
								exists = err == nil
								return nil
							})
							if exists {
								_, err = f.log.Append(t.Context(), persistence.PlacementPoolKey("p"), seq, persistence.Change{Delete: true})
								require.NoError(t, err)
								break
							}
						}
					}
					rep := managerpb.PoolDisconnect_REPLACE_IMMEDIATELY
					if rng.IntN(2) == 0 {
						rep = managerpb.PoolDisconnect_REPLACE_WAIT
					}
					f.put(persistence.PlacementPoolKey("p"), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: "p",
						RestartCeiling: &managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600},
						Disconnect:     &managerpb.PoolDisconnect{Replace: rep}}})
				case 7: // a bundle (re)written: two replicas, a co_locate_with group
					spec := func(name string, c float64) *managerpb.BundleJobSpec {
						return &managerpb.BundleJobSpec{JobName: name, Job: autoJob("x", c, nil).GetJob().GetJob()}
					}
					enc, pkg, mon := spec("enc", 0.3), spec("pkg", 0.2), spec("mon", 0.1)
					pkg.CoLocateWith = []string{"enc"}
					if rng.IntN(2) == 0 {
						mon.SeparateFrom = []string{"enc"}
					}
					b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, Pool: "p",
						Jobs: []*managerpb.BundleJobSpec{enc, pkg, mon}}
					if rng.IntN(4) != 0 {
						b.ResiliencePolicy = &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity(rng.IntN(3)), SameAz: managerpb.AntiAffinity(rng.IntN(3))}
					}
					f.putBundle(b, map[string]bool{"mon": rng.IntN(2) == 0})
				case 13: // the whole bundle placed and running, each replica on its own node
					if _, ok := live(bundle.JobID("b", 0, "enc")); ok {
						for r := range uint32(2) {
							n := nodes[rng.IntN(len(nodes))]
							for _, name := range []string{"enc", "pkg", "mon"} {
								if rec, ok := live(bundle.JobID("b", r, name)); ok {
									in := instance([]string{"primary", "backup"}[r], n)
									in.Status = internalpb.InstanceStatus_INSTANCE_RUNNING
									rec.Instances, rec.Migrations = []*internalpb.Instance{in}, nil
									f.putJob(rec)
								}
							}
						}
					}
				case 14: // a node lost: its record STOPPED, its instances ended NODE_STOPPED
					n := nodes[rng.IntN(len(nodes))]
					f.put(persistence.NodeKey(n), &internalpb.NodeRecord{NodeId: n, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
						State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, Resources: &commonpb.NodeResources{Capacity: 4, Zone: "z" + n[1:]}})
					var recs []*internalpb.JobRecord
					require.NoError(t, f.store.View(func(r *persistence.Reader) error {
						return r.Jobs(func(j *internalpb.JobRecord) error { recs = append(recs, j); return nil })
					}))
					for _, rec := range recs {
						for _, in := range slices.Clone(rec.GetInstances()) {
							if in.GetNodeId() != n {
								continue
							}
							if _, derived := rec.GetJob().GetJob().GetTags()[bundle.TagBundleID]; !derived && rng.IntN(2) == 0 {
								rec.Job.Job.Tags = map[string]string{persistence.PoolTag: "p"}
							}
							rec.Migrations = nil
							f.endInstance(rec, in.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED, "")
						}
					}
				case 8: // a derived job placed, moving or stopping
					id := bundle.JobID("b", uint32(rng.IntN(2)), []string{"enc", "pkg", "mon"}[rng.IntN(3)])
					if rec, ok := live(id); ok {
						role := "primary"
						if id[len("b")+1:][0] == '1' || rng.IntN(4) == 0 {
							role = "backup"
						}
						in := instance(role, nodes[rng.IntN(len(nodes))])
						in.Placement = &internalpb.PlacementNote{Degradation: managerpb.PlacementDegraded_State(rng.IntN(3)),
							DegradedAtPlacement: []string{"zone"}[:rng.IntN(2)]}
						rec.Instances = []*internalpb.Instance{in}
						rec.Migrations = nil
						if rng.IntN(3) == 0 {
							withMove(rec, role)
						}
						f.putJob(rec)
					}
				case 9: // a job's instance ends: its node lost, or it failed
					if rec, ok := live(jobID()); ok && len(rec.GetInstances()) > 0 {
						reason := managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED
						if rng.IntN(2) == 0 {
							reason = managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED
						} else if _, derived := rec.GetJob().GetJob().GetTags()[bundle.TagBundleID]; !derived {
							rec.Job.Job.Tags = map[string]string{persistence.PoolTag: "p"} // the pool's replace wait
						}
						rec.Migrations = nil
						f.endInstance(rec, rec.GetInstances()[0].GetRole(), reason, "crash")
					}
				case 10: // the bundle record alone changes: dormant, DELETING, LIVE
					var rec *internalpb.BundleRecord
					if f.store.View(func(r *persistence.Reader) error {
						var err error
						rec, _, err = r.Bundle("b")
						return err
					}) == nil {
						for _, js := range rec.GetJobs() {
							js.Dormant = rng.IntN(3) == 0
						}
						rec.Bundle.State = []managerpb.BundleState{managerpb.BundleState_BUNDLE_STATE_LIVE, managerpb.BundleState_BUNDLE_STATE_DELETING}[rng.IntN(2)]
						f.put(persistence.BundleKey("b"), rec)
					}
				case 11: // a job leaves the placement-relevant set, or comes back
					if rec, ok := live(jobID()); ok {
						if rec.GetJob().GetJob().GetTerminalState() != nil {
							rec.Job.Job.TerminalState = nil
						} else {
							rec.Job.Job.TerminalState = &managerpb.TerminalState{FailureReason: "given up"}
							rec.Instances, rec.Migrations = nil, nil
						}
						f.putJob(rec)
					}
				case 12: // a snapshot taken, or restored (a follower catching up)
					if snap == nil || rng.IntN(2) == 0 {
						var buf bytes.Buffer
						require.NoError(t, f.store.WriteSnapshot(&buf))
						snap = buf.Bytes()
					} else {
						require.NoError(t, f.store.RestoreSnapshot(bytes.NewReader(snap)))
					}
				default: // time passes
					f.now = f.now.Add(time.Duration(rng.IntN(40)) * time.Second)
				}
				whole.base = newBase()
				require.NoError(t, inc.Pass(t.Context()), "step %d", step)
				require.NoError(t, whole.Pass(t.Context()), "step %d", step)
				inc.settle()
				whole.settle()
				require.Equal(t, wholeR.take(), incR.take(), "step %d (op %d): the commands sent", step, op)
				require.Equal(t, baseSummary(whole.base, f.now), baseSummary(inc.base, f.now), "step %d (op %d)", step, op)
				requireWorldUntouched(t, f.store)
			}
		})
	}
}
