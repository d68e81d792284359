package placement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// BenchmarkEngine_Pass measures one pass over a store of 100 nodes and
// 1,000 auto-placed jobs of 1 unit: "idle" with every job placed (the
// steady-state cost of the 500 ms pass on the leader), "decide" with every
// job to place (1,000 decisions and StartJobs, which the fake job grain
// refuses so the store stays as it is; a fresh engine each time).
func BenchmarkEngine_Pass(b *testing.B) {
	for _, tc := range []struct {
		name string
		idle bool
	}{{name: "idle", idle: true}, {name: "decide"}} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b)
			for i := range 100 {
				f.putNode(fmt.Sprintf("n%03d", i), 100, fmt.Sprintf("z%d", i%3), nil)
			}
			for i := range 1000 {
				f.putJob(autoJob(fmt.Sprintf("j%04d", i), 1, nil))
			}
			if tc.idle {
				f.pass()
			} else {
				f.router.refuse = actors.Fail(errorpb.Code_FAILED_PRECONDITION, "benchmark")
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				e := f.eng
				if !tc.idle {
					cfg := DefaultConfig()
					cfg.Store, cfg.Router, cfg.Clock = f.store, f.router, func() time.Time { return f.now }
					var err error
					e, err = New(cfg)
					require.NoError(b, err)
				}
				require.NoError(b, e.Pass(ctx))
				e.settle()
			}
		})
	}
}

// BenchmarkEngine_PassScale measures a pass on 1,000 nodes as the stored
// jobs grow from 1,000 to 100,000 (issue 22 §1): "idle" with every job placed and nothing
// changed, "one-change" after one job's record changed (a tag), and
// "history" with the same jobs completed (no instance, not placeable),
// which the World view leaves out. The figure to watch is how ns/op grows
// with the job count.
func BenchmarkEngine_PassScale(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		for _, shape := range []string{"idle", "one-change", "history"} {
			b.Run(fmt.Sprintf("%s/jobs=%d", shape, n), func(b *testing.B) {
				f := newFixture(b)
				for i := range 1000 {
					f.putNode(fmt.Sprintf("n%04d", i), 100, fmt.Sprintf("z%d", i%3), nil)
				}
				for i := range n {
					rec := autoJob(fmt.Sprintf("j%06d", i), 1, nil)
					if shape == "history" {
						rec.Job.Job.State = managerpb.Job_POST
					} else {
						rec.Instances = []*internalpb.Instance{{Role: "primary", NodeId: fmt.Sprintf("n%04d", i%1000),
							Status: internalpb.InstanceStatus_INSTANCE_RUNNING, DefinitionHash: 7}}
					}
					f.putJob(rec)
				}
				f.pass()
				ctx := context.Background()
				b.ResetTimer()
				for i := range b.N {
					if shape == "one-change" {
						b.StopTimer()
						rec := f.job("j000001")
						rec.Job.Job.Tags = map[string]string{"i": fmt.Sprint(i)}
						f.putJob(rec)
						b.StartTimer()
					}
					require.NoError(b, f.eng.Pass(ctx))
					f.eng.settle()
				}
			})
		}
	}
}
