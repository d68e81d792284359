package gateway

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// TestServer_Barrier_NoLeader: a read on a manager whose barrier cannot
// complete (no leader) answers Unavailable after BarrierTimeout, not
// DeadlineExceeded after the caller's whole deadline, so that a client of
// several managers retries on another; a caller deadline shorter than
// BarrierTimeout keeps its own code.
func TestServer_Barrier_NoLeader(t *testing.T) {
	noLeader := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	s := New(Config{Barrier: noLeader, BarrierTimeout: 100 * time.Millisecond})
	cases := []struct {
		name     string
		deadline time.Duration
		want     codes.Code
	}{
		{"caller deadline beyond the barrier timeout", time.Minute, codes.Unavailable},
		{"caller deadline first", 20 * time.Millisecond, codes.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			start := time.Now()
			_, err := s.JobById(ctx, &commonpb.JobId{JobId: "j"})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("JobById = %v, want %v", err, tc.want)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("JobById took %s", took)
			}
		})
	}
}
