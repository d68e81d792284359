package replication

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/persistence"
)

func TestNoSpaceStatus_RoundTrip(t *testing.T) {
	ns := &persistence.NoSpaceError{Dir: "/var/lib/nm", Free: 3 << 20, MinFree: 256 << 20, Manager: "m1"}
	tests := []struct {
		name string
		err  error
		want *persistence.NoSpaceError
	}{
		{"the leader's refusal", noSpaceStatus(ns), ns},
		{"another RESOURCE_EXHAUSTED (a message over gRPC's limit)", status.Error(codes.ResourceExhausted, "message larger than max"), nil},
		{"another code", status.Error(codes.Unavailable, "x"), nil},
		{"not a status", errors.New("x"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := noSpaceFromStatus(tt.err)
			if tt.want == nil {
				if got != nil {
					t.Fatalf("noSpaceFromStatus(%v) = %v, want nil", tt.err, got)
				}
				return
			}
			if got == nil || *got != *tt.want {
				t.Fatalf("noSpaceFromStatus = %+v, want %+v", got, tt.want)
			}
			if !errors.Is(got, persistence.ErrNoSpace) {
				t.Fatal("the rebuilt error does not wrap ErrNoSpace")
			}
			if status.Convert(tt.err).Message() != got.Error() {
				t.Fatalf("the status says %q, the rebuilt error %q", status.Convert(tt.err).Message(), got.Error())
			}
		})
	}
}
