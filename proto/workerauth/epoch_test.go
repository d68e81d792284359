package workerauth

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStaleEpochOf(t *testing.T) {
	err := StaleEpochError(3, 19)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("code %v", status.Code(err))
	}
	if e, ok := StaleEpochOf(err); !ok || e != 19 {
		t.Fatalf("StaleEpochOf = %d, %v; want 19, true", e, ok)
	}
	for _, other := range []error{nil, errors.New("x"), status.Error(codes.FailedPrecondition, "no detail"), status.Error(codes.Aborted, "superseded")} {
		if _, ok := StaleEpochOf(other); ok {
			t.Errorf("StaleEpochOf(%v) = true", other)
		}
	}
}
