package placement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
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
