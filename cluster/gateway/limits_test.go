package gateway

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestCallerKey(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	cases := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"in-process call", context.Background(), "unknown"},
		{"peer only: its IP, not its port", peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("127.0.0.7:4242")}), "address 127.0.0.7"},
		{"IPv6 peer", peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("[::1]:4242")}), "address ::1"},
		{"anonymous identity: the peer still", identity.With(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("10.0.0.1:1")}),
			identity.Caller{Name: identity.Anonymous, Peer: "10.0.0.1:1"}), "address 10.0.0.1"},
		{"identity peer with a certificate name", identity.With(context.Background(), identity.Caller{Peer: "10.0.0.2:5 cn=client.norsk"}), "address 10.0.0.2"},
		{"token: the token, whatever the address", identity.With(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("10.0.0.1:1")}),
			identity.Caller{Name: "ci", TokenID: "tok-1", Role: "read"}), "token tok-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := callerKey(tc.ctx); got != tc.want {
				t.Fatalf("callerKey = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCallerStreams_Acquire(t *testing.T) {
	c := newCallerStreams(2)
	r1, err := c.acquire("address 127.0.0.1")
	requireOK(t, err)
	_, err = c.acquire("address 127.0.0.1")
	requireOK(t, err)
	_, err = c.acquire("address 127.0.0.1")
	requireStatus(t, err, codes.ResourceExhausted, "address 127.0.0.1 already has 2 open", "--max-event-streams-per-caller")
	_, err = c.acquire("token t2")
	requireOK(t, err) // another caller is not affected
	r1()
	r1() // a second release gives nothing back twice
	if n := c.openBy("address 127.0.0.1"); n != 1 {
		t.Fatalf("open after one release = %d, want 1", n)
	}
	_, err = c.acquire("address 127.0.0.1")
	requireOK(t, err)
	_, err = c.acquire("address 127.0.0.1")
	requireStatus(t, err, codes.ResourceExhausted, "already has 2 open")

	unlimited := newCallerStreams(-1)
	for range 100 {
		_, err := unlimited.acquire("k")
		requireOK(t, err)
	}
}

// fakeClock is a settable clock for the rate limiter.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestRegisterLimiter_Allow(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := newRegisterLimiter(LimitsConfig{RegisterRate: 0.5, RegisterBurst: 3, MaxRegisterSources: 100}, clk.Now)
	for i := range 3 {
		if err := l.allow("10.0.0.1"); err != nil {
			t.Fatalf("registration %d within the burst: %v", i+1, err)
		}
	}
	err := l.allow("10.0.0.1")
	requireStatus(t, err, codes.ResourceExhausted, "address 10.0.0.1", "--register-rate", "retry after 2s")
	if d := retryDelay(t, err); d != 2*time.Second {
		t.Fatalf("RetryInfo delay = %s, want 2s (one token at 0.5/s)", d)
	}
	// A refusal takes no token: after the delay exactly one more is allowed.
	requireStatus(t, l.allow("10.0.0.1"), codes.ResourceExhausted)
	if err := l.allow("10.0.0.2"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	clk.Advance(2 * time.Second)
	requireOK(t, l.allow("10.0.0.1"))
	requireStatus(t, l.allow("10.0.0.1"), codes.ResourceExhausted)

	off := newRegisterLimiter(LimitsConfig{RegisterRate: -1, RegisterBurst: 1}, clk.Now)
	for range 100 {
		requireOK(t, off.allow("10.0.0.1"))
	}
}

// TestRegisterLimiter_Sources: the buckets of many addresses stay bounded,
// and an address refused keeps its bucket while idle ones are forgotten.
func TestRegisterLimiter_Sources(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := newRegisterLimiter(LimitsConfig{RegisterRate: 1, RegisterBurst: 1, MaxRegisterSources: 3}, clk.Now)
	requireOK(t, l.allow("hot"))
	requireStatus(t, l.allow("hot"), codes.ResourceExhausted)
	for _, a := range []string{"a", "b", "c", "d", "e"} {
		requireOK(t, l.allow(a))
		if n := l.sources(); n > 3 {
			t.Fatalf("%d buckets after %s, the limit is 3", n, a)
		}
	}
	clk.Advance(time.Second) // every bucket is full again: all forgettable
	for _, a := range []string{"f", "g", "h"} {
		requireOK(t, l.allow(a))
	}
	if n := l.sources(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
}

// TestServer_ClusterMemberRegister_RateLimit: over gRPC, the limit is per
// source address and comes before anything else (even a request that
// would be refused for its content counts).
func TestServer_ClusterMemberRegister_RateLimit(t *testing.T) {
	s := New(Config{Limits: LimitsConfig{RegisterRate: rate.Every(time.Hour), RegisterBurst: 2}})
	c := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		_, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{})
		requireStatus(t, err, codes.Unauthenticated, "token")
	}
	_, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "t", Address: "127.0.0.1", Port: 1})
	requireStatus(t, err, codes.ResourceExhausted, "address 127.0.0.1", "retry after 1h0m0s")
	if d := retryDelay(t, err); d != time.Hour {
		t.Fatalf("RetryInfo delay = %s, want 1h", d)
	}
}

// TestServer_EventStream_PerCallerLimit: the streams of one address beyond
// the limit are refused with ResourceExhausted naming it, and a slot freed
// by a client that goes away is usable again.
func TestServer_EventStream_PerCallerLimit(t *testing.T) {
	store, _ := persistence.TestStore(t)
	s := New(Config{Store: store, Limits: LimitsConfig{MaxEventStreamsPerCaller: 2}})
	c := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(ctx context.Context) (managerpb.Manager_EventStreamClient, error) {
		st, err := c.EventStream(ctx, &managerpb.EventStreamRequest{})
		if err != nil {
			return nil, err
		}
		_, err = st.Recv() // the snapshot's first event, or the refusal
		return st, err
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	_, err := open(ctx1)
	requireOK(t, err)
	_, err = open(ctx)
	requireOK(t, err)
	_, err = open(ctx)
	requireStatus(t, err, codes.ResourceExhausted, "address 127.0.0.1 already has 2 open", "--max-event-streams-per-caller")
	cancel1()
	deadline := time.Now().Add(20 * time.Second)
	for s.streams.openBy("address 127.0.0.1") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled stream's slot was not released")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = open(ctx)
	requireOK(t, err)
}

// serve serves s on a loopback port and returns a client of it.
func serve(t *testing.T, s *Server) managerpb.ManagerClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-done })
	return managerpb.NewManagerClient(conn)
}

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("no RetryInfo in %v", err)
	return 0
}

func requireOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func requireStatus(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("code %s (%v), want %s", status.Code(err), err, code)
	}
	for _, c := range contains {
		if !strings.Contains(status.Convert(err).Message(), c) {
			t.Fatalf("message %q lacks %q", status.Convert(err).Message(), c)
		}
	}
}
