package client_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogWriter sends log lines to t.Log.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connect returns a client of the managers at addrs with fast reconnects and
// a log to t.Log, closed when the test ends.
func connect(t *testing.T, addrs ...string) *client.NorskManager {
	t.Helper()
	m, err := client.Connect(context.Background(), client.Settings{
		URL:     strings.Join(addrs, ","),
		Timeout: 10 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(testLogWriter{t}, nil)),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// serveFake starts a fresh fake manager and returns it with a client.
func serveFake(t *testing.T) (*clienttest.Manager, *clienttest.Server, *client.NorskManager) {
	t.Helper()
	fake := clienttest.NewManager(nil)
	srv := clienttest.Serve(t, fake, "127.0.0.1:0")
	return fake, srv, connect(t, srv.Addr)
}
