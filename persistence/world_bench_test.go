package persistence

import (
	"fmt"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// BenchmarkWorld_Apply measures the World's share of one apply: one job
// record written per batch, in a World of 10,000 jobs.
func BenchmarkWorld_Apply(b *testing.B) {
	for _, relevant := range []bool{true, false} {
		b.Run(fmt.Sprintf("relevant=%v", relevant), func(b *testing.B) {
			w, err := newWorld()
			if err != nil {
				b.Fatal(err)
			}
			for i := range 10000 {
				rec := worldJob(fmt.Sprintf("j%06d", i), managerpb.Job_ACTIVE, true, false, 1)
				w.take([]worldChange{{key: JobKey(fmt.Sprintf("j%06d", i)), seq: 1, rec: rec}})
			}
			rec := worldJob("x", managerpb.Job_ACTIVE, relevant, false, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				w.take([]worldChange{{key: JobKey(fmt.Sprintf("k%08d", i)), seq: 1, rec: rec}})
				if i%64 == 0 {
					_, _ = w.Read() // a pass's snapshot now and then: the next writes copy what they touch
				}
			}
		})
	}
}
