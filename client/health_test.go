package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
)

// TestNorskManager_SkipsNotServing: a manager whose grpc.health.v1 status
// is NOT_SERVING (no Raft leader) gets no calls, reads or writes, while
// another serves; when it serves again it gets calls again.
func TestNorskManager_SkipsNotServing(t *testing.T) {
	isolated := clienttest.NewManager(nil)
	isolated.Fail("", status.Error(codes.Unavailable, "grain did not answer in time"))
	a := clienttest.Serve(t, isolated, "127.0.0.1:0")
	a.SetServing(false)
	b := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	m := connect(t, a.Addr, b.Addr)
	ctx := context.Background()
	for i := range 8 {
		if _, err := m.CreateJob(ctx, testJob("j"+string(rune('a'+i)))); err != nil {
			t.Fatalf("CreateJob #%d: %v", i, err)
		}
		if _, addr, err := m.VersionFrom(ctx); err != nil || addr != b.Addr {
			t.Fatalf("Version #%d answered by %q (%v), want %s", i, addr, err, b.Addr)
		}
	}
	// Back to SERVING: round_robin uses it again.
	isolated.Fail("", nil)
	a.SetServing(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, addr, err := m.VersionFrom(ctx)
		if err != nil {
			t.Fatalf("Version: %v", err)
		}
		if addr == a.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the manager serving again never got a call")
		}
	}
}

// TestNorskManager_AllNotServing: when no manager serves, a call fails at
// once (not after the call timeout) with Unavailable, a local error that
// names each manager and says it reports NOT_SERVING.
func TestNorskManager_AllNotServing(t *testing.T) {
	a := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	b := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	a.SetServing(false)
	b.SetServing(false)
	m := connect(t, a.Addr, b.Addr) // 10 s call timeout
	calls := map[string]func(ctx context.Context) error{
		"Version":   func(ctx context.Context) error { _, err := m.Version(ctx); return err },
		"CreateJob": func(ctx context.Context) error { _, err := m.CreateJob(ctx, testJob("x")); return err },
		"JobSearch": func(ctx context.Context) error { _, err := m.JobSearch(ctx); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call(context.Background())
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("%s took %s with no manager serving", name, took)
			}
			wantCode(t, name, err, codes.Unavailable)
			ce, ok := errors.AsType[*client.CallError](err)
			if !ok || !ce.Local || ce.Addr != "" {
				t.Fatalf("%s: %#v, want a local *CallError", name, err)
			}
			for _, want := range []string{"no manager serves: " + a.Addr + " NOT_SERVING (no Raft leader), " + b.Addr + " NOT_SERVING (no Raft leader)"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q does not say %q", name, err, want)
				}
			}
		})
	}
}

// TestNorskManager_ErrorOrigin: a status from a manager is marked as such
// with the manager's address; a call that reaches no manager is local and
// says, for each address, what the last connection attempt gave.
func TestNorskManager_ErrorOrigin(t *testing.T) {
	fake := clienttest.NewManager(nil)
	srv := clienttest.Serve(t, fake, "127.0.0.1:0")
	down := clienttest.UnusedAddr(t)
	// A TCP port that closes connections without speaking gRPC.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	mute := lis.Addr().String()

	cases := []struct {
		name      string
		addrs     []string
		fail      error
		wantLocal bool
		wantAddr  string
		want      []string
	}{
		{"manager's status", []string{srv.Addr}, status.Error(codes.Unavailable, "no quorum"), false, srv.Addr, []string{"no quorum"}},
		{"connection refused", []string{down}, nil, true, "", []string{"no manager serves: " + down + " unreachable: connect: connection refused"}},
		{"not a manager", []string{mute}, nil, true, "", []string{"no manager serves: " + mute + " unreachable: connection closed before the manager answered"}},
		{"both", []string{down, mute}, nil, true, "", []string{down + " unreachable: connect: connection refused", mute + " unreachable: connection closed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.Fail("ListNodes", tc.fail)
			defer fake.Fail("ListNodes", nil)
			m := connect(t, tc.addrs...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			// Until every address was tried once (the first call may fail
			// before the second address's first attempt is recorded).
			for {
				_, err = m.ListNodes(ctx)
				if ce, ok := errors.AsType[*client.CallError](err); !ok || !ce.Local || ctx.Err() != nil ||
					!strings.Contains(err.Error(), "not tried") {
					break
				}
			}
			wantCode(t, "ListNodes", err, codes.Unavailable)
			ce, ok := errors.AsType[*client.CallError](err)
			if !ok || ce.Local != tc.wantLocal || ce.Addr != tc.wantAddr {
				t.Fatalf("%#v: want Local %v, Addr %q", err, tc.wantLocal, tc.wantAddr)
			}
			for _, w := range tc.want {
				// gRPC may give up while its newest connection to the mute
				// port is still open: the address then reads "connected",
				// and gRPC's own words say that the peer hung up.
				if !strings.Contains(err.Error(), w) && !(strings.Contains(w, "connection closed") &&
					strings.Contains(err.Error(), "error reading server preface")) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// TestNorskManager_VersionFrom: the address of the manager that answered.
func TestNorskManager_VersionFrom(t *testing.T) {
	_, srv, m := serveFake(t)
	_, addr, err := m.VersionFrom(context.Background())
	if err != nil || addr != srv.Addr {
		t.Fatalf("VersionFrom = %q, %v; want %s", addr, err, srv.Addr)
	}
}

// TestNorskManager_NoQuorumNamesEachCause: with one manager up but
// NOT_SERVING (no Raft leader) and another down, the error names both
// causes, read and write alike, not the last dial error gRPC kept (issue 10
// §6: it said "connection refused" of the other address).
func TestNorskManager_NoQuorumNamesEachCause(t *testing.T) {
	a := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	a.SetServing(false)
	down := clienttest.UnusedAddr(t)
	m := connect(t, a.Addr, down)
	calls := map[string]func(ctx context.Context) error{
		"Version":   func(ctx context.Context) error { _, err := m.Version(ctx); return err },
		"CreateJob": func(ctx context.Context) error { _, err := m.CreateJob(ctx, testJob("x")); return err },
	}
	want := "no manager serves: " + a.Addr + " NOT_SERVING (no Raft leader), " + down + " unreachable: connect: connection refused"
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call(context.Background())
			wantCode(t, name, err, codes.Unavailable)
			ce, ok := errors.AsType[*client.CallError](err)
			if !ok || !ce.Local {
				t.Fatalf("%#v: want a local *CallError", err)
			}
			if got := "norsk manager: " + name + ": " + want; err.Error() != got {
				t.Errorf("error\n%q\nwant\n%q", err, got)
			}
			if got := ce.ConnectionSummary(); got != want {
				t.Errorf("ConnectionSummary\n%q\nwant\n%q", got, want)
			}
		})
	}
}
