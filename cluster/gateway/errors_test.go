package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
)

func TestToStatus(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"status passes through", status.Error(codes.PermissionDenied, "x"), codes.PermissionDenied},
		{"grain reply", &actors.ReplyError{Code: errorpb.Code_FAILED_PRECONDITION, Message: "stale"}, codes.FailedPrecondition},
		{"wrapped grain reply", fmt.Errorf("ctx: %w", &actors.ReplyError{Code: errorpb.Code_NOT_FOUND}), codes.NotFound},
		{"unauthenticated reply", &actors.ReplyError{Code: errorpb.Code_UNAUTHENTICATED}, codes.Unauthenticated},
		{"filter error", &persistence.FilterError{Index: 1, Field: "id_filter.re", Reason: "bad"}, codes.InvalidArgument},
		{"canceled", context.Canceled, codes.Canceled},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"grain timeout", actors.ErrGrainTimeout, codes.Unavailable},
		{"not found", fmt.Errorf("load: %w", persistence.ErrNotFound), codes.NotFound},
		{"closed", persistence.ErrClosed, codes.Unavailable},
		{"restoring", fmt.Errorf("begin backup: %w", persistence.ErrRestoring), codes.Unavailable},
		{"too large", fmt.Errorf("append: %w", persistence.ErrTooLarge), codes.ResourceExhausted},
		{"no space", fmt.Errorf("append: %w", &persistence.NoSpaceError{Dir: "/d", Free: 1, MinFree: 2}), codes.ResourceExhausted},
		{"corrupt", fmt.Errorf("decode: %w", persistence.ErrCorrupt), codes.DataLoss},
		{"conflict", &persistence.ConflictError{Key: "job/x"}, codes.Internal},
		{"anything else", errors.New("boom"), codes.Internal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(toStatus(tc.err)); got != tc.want {
				t.Fatalf("toStatus(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
