package worker

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestRetryAfter(t *testing.T) {
	with := func(d time.Duration) error {
		st, err := status.New(codes.ResourceExhausted, "registration rate limit").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	cases := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"not a status", errors.New("dial failed"), 0},
		{"status without RetryInfo", status.Error(codes.Unavailable, "down"), 0},
		{"RetryInfo", with(1500 * time.Millisecond), 1500 * time.Millisecond},
		{"negative delay", with(-time.Second), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryAfter(tc.err); got != tc.want {
				t.Fatalf("retryAfter = %s, want %s", got, tc.want)
			}
		})
	}
}
