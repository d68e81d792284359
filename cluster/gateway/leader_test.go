package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// countingRouter answers every grain command with an empty reply (or, if
// block, waits for ctx like a grain that cannot commit) and counts them.
type countingRouter struct {
	actors.Router // only Request is used
	calls         atomic.Int64
	block         bool
}

func (r *countingRouter) Request(ctx context.Context, _, _ string, _ proto.Message) (*internalpb.Reply, error) {
	r.calls.Add(1)
	if r.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &internalpb.Reply{}, nil
}

// TestServer_Write_NoLeader: a write on a manager that knows no Raft leader
// answers Unavailable within LeaderWait, saying nothing was done, without
// reaching a grain (which would wait out the grain timeout); a leader
// elected during the wait lets the write through; the caller's deadline
// keeps its code.
func TestServer_Write_NoLeader(t *testing.T) {
	cases := []struct {
		name       string
		leaderIn   time.Duration // -1: never
		wait       time.Duration
		deadline   time.Duration
		want       codes.Code
		wantGrains int64
	}{
		{"no leader", -1, 100 * time.Millisecond, time.Minute, codes.Unavailable, 0},
		{"no leader, no wait", -1, -1, time.Minute, codes.Unavailable, 0},
		{"leader elected while waiting", 50 * time.Millisecond, 10 * time.Second, time.Minute, codes.OK, 1},
		{"caller deadline first", -1, 10 * time.Second, 50 * time.Millisecond, codes.DeadlineExceeded, 0},
		{"leader known", 0, 100 * time.Millisecond, time.Minute, codes.OK, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			known := func() bool { return tc.leaderIn >= 0 && time.Since(start) >= tc.leaderIn }
			router := &countingRouter{block: true}
			if tc.want == codes.OK {
				router.block = false
			}
			s := New(Config{Router: router, LeaderKnown: known, LeaderWait: tc.wait})
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_, err := s.DeleteJob(ctx, &commonpb.JobId{JobId: "j"})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("DeleteJob = %v, want %v", err, tc.want)
			}
			if tc.want == codes.Unavailable {
				if msg := status.Convert(err).Message(); msg != errNoLeader {
					t.Fatalf("message %q, want %q", msg, errNoLeader)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("DeleteJob took %s", took)
			}
			if n := router.calls.Load(); n != tc.wantGrains {
				t.Fatalf("%d grain commands sent, want %d", n, tc.wantGrains)
			}
		})
	}
}

// TestServer_Write_NoLeader_AllWrites: every kind of write checks for a
// leader (job, node and bundle commands).
func TestServer_Write_NoLeader_AllWrites(t *testing.T) {
	router := &countingRouter{block: true}
	s := New(Config{Router: router, LeaderKnown: func() bool { return false }, LeaderWait: -1})
	ctx := context.Background()
	writes := map[string]func() error{
		"DeleteJob": func() error {
			_, err := s.DeleteJob(ctx, &commonpb.JobId{JobId: "j"})
			return err
		},
		"StopJob": func() error {
			_, err := s.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: "n"}})
			return err
		},
		"TerminateNode": func() error {
			_, err := s.TerminateNode(ctx, &commonpb.NodeId{NodeId: "n"})
			return err
		},
		"DeleteBundle": func() error {
			_, err := s.DeleteBundle(ctx, &managerpb.BundleId{BundleId: "b"})
			return err
		},
		"MigrateJob": func() error {
			_, err := s.MigrateJob(ctx, &managerpb.MigrateJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", TargetNodeId: "any"})
			return err
		},
		"AbortMigration": func() error {
			_, err := s.AbortMigration(ctx, &managerpb.AbortMigrationRequest{JobId: &commonpb.JobId{JobId: "j"}, SourceRole: "primary", TargetRole: "primary~1"})
			return err
		},
	}
	for name, call := range writes {
		t.Run(name, func(t *testing.T) {
			err := call()
			if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != errNoLeader {
				t.Fatalf("%s = %v, want Unavailable %q", name, err, errNoLeader)
			}
		})
	}
	if n := router.calls.Load(); n != 0 {
		t.Fatalf("%d grain commands sent without a leader", n)
	}
}
