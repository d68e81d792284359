package testproc

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Await polls cond every 50 ms until it returns nil, failing the test after
// timeout with the last error cond returned (so a timeout says what was
// still wrong, not only what was awaited).
func Await(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Health returns the status the gRPC health service at addr answers for
// the whole server (service ""), or the error of the check (the manager is
// down, or did not answer within a second).
func Health(addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return r.GetStatus(), nil
}

// RemoveBin deletes the binaries Bin built, if any. Call it from TestMain
// after m.Run; later calls of Bin in the same process fail.
func RemoveBin() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}
