package gateway

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
)

// LimitsConfig bounds what one caller may hold or do
// (docs/design/security.md, "Limits"). The zero value takes the defaults.
type LimitsConfig struct {
	// MaxEventStreamsPerCaller bounds the EventStream calls one caller
	// holds open at once: a caller is its ACL token (identity.Caller's
	// TokenID) when ACLs are on, else the IP address it connects from.
	// One more gets ResourceExhausted naming the limit. Default 64;
	// negative: no per-caller limit (EventStreamConfig.MaxSubscribers still
	// bounds the total).
	MaxEventStreamsPerCaller int
	// MaxJobSearchesPerCaller bounds the JobSearch calls one caller (as
	// for MaxEventStreamsPerCaller) has running at once, MaxJobSearches
	// those of all callers: a search holds a batch of up to 1 MiB of
	// records while its client reads (jobsearch.go). One more gets
	// ResourceExhausted naming the limit. Defaults 8 and 64; negative: no
	// limit.
	MaxJobSearchesPerCaller int
	MaxJobSearches          int
	// RegisterRate is how many ClusterMemberRegister calls per second one
	// source IP address may make on average, RegisterBurst how many at
	// once (a token bucket). Beyond it: ResourceExhausted with a
	// google.rpc.RetryInfo saying when to retry. Defaults 1/s and 20;
	// a negative RegisterRate: no limit.
	RegisterRate  rate.Limit
	RegisterBurst int
	// MaxRegisterSources bounds the source addresses whose buckets are
	// remembered; past it idle (full) buckets are forgotten first, then
	// any (that address starts again with a full bucket). Default 10000.
	MaxRegisterSources int
}

// Limit defaults (LimitsConfig).
const (
	DefaultMaxEventStreamsPerCaller = 64
	DefaultMaxJobSearchesPerCaller  = 8
	DefaultMaxJobSearches           = 64
	DefaultRegisterRate             = rate.Limit(1)
	DefaultRegisterBurst            = 20
	defaultMaxRegisterSources       = 10_000
)

func (c *LimitsConfig) defaults() {
	if c.MaxEventStreamsPerCaller == 0 {
		c.MaxEventStreamsPerCaller = DefaultMaxEventStreamsPerCaller
	}
	if c.MaxJobSearchesPerCaller == 0 {
		c.MaxJobSearchesPerCaller = DefaultMaxJobSearchesPerCaller
	}
	if c.MaxJobSearches == 0 {
		c.MaxJobSearches = DefaultMaxJobSearches
	}
	if c.RegisterRate == 0 {
		c.RegisterRate = DefaultRegisterRate
	}
	if c.RegisterBurst <= 0 {
		c.RegisterBurst = DefaultRegisterBurst
	}
	if c.MaxRegisterSources <= 0 {
		c.MaxRegisterSources = defaultMaxRegisterSources
	}
}

// callerKey names the caller of ctx for per-caller limits: "token <id>"
// with an ACL token, else "address <ip>" of the connection (the port is
// left out: a client reconnecting, or opening another connection, is the
// same caller), else "unknown" (an in-process call).
func callerKey(ctx context.Context) string {
	if c, ok := identity.From(ctx); ok && c.TokenID != "" {
		return "token " + c.TokenID
	}
	if ip := sourceIP(ctx); ip != "" {
		return "address " + ip
	}
	return "unknown"
}

// sourceIP returns the IP address (or, for a non-IP transport, the
// address) the call came from: gRPC's peer, else the identity's Peer; ""
// if neither is known.
func sourceIP(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return hostOf(p.Addr.String())
	}
	if c, ok := identity.From(ctx); ok && c.Peer != "" {
		addr, _, _ := strings.Cut(c.Peer, " ") // "host:port cn=…"
		return hostOf(addr)
	}
	return ""
}

func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// callerStreams counts the event streams each caller holds open.
type callerStreams struct {
	max int // <= 0: unlimited
	mu  struct {
		sync.Mutex
		open map[string]int
	}
}

func newCallerStreams(max int) *callerStreams {
	c := &callerStreams{max: max}
	c.mu.open = map[string]int{}
	return c
}

// acquire takes one stream slot for key, or returns ResourceExhausted
// naming the caller and the limit; release gives the slot back (once).
func (c *callerStreams) acquire(key string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.mu.open[key] >= c.max {
		return nil, status.Errorf(codes.ResourceExhausted,
			"event streams: %s already has %d open, the limit per caller (--max-event-streams-per-caller); close one, or share one stream between consumers",
			key, c.max)
	}
	c.mu.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.mu.open[key]--; c.mu.open[key] <= 0 {
				delete(c.mu.open, key)
			}
		})
	}, nil
}

// openBy returns how many streams key holds (tests).
func (c *callerStreams) openBy(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.open[key]
}

// registerLimiter is a token bucket per source address for
// ClusterMemberRegister.
type registerLimiter struct {
	rate  rate.Limit // < 0: unlimited
	burst int
	max   int
	now   func() time.Time
	mu    struct {
		sync.Mutex
		buckets map[string]*rate.Limiter
	}
}

func newRegisterLimiter(cfg LimitsConfig, now func() time.Time) *registerLimiter {
	l := &registerLimiter{rate: cfg.RegisterRate, burst: cfg.RegisterBurst, max: cfg.MaxRegisterSources, now: now}
	l.mu.buckets = map[string]*rate.Limiter{}
	return l
}

// allow takes a token of addr's bucket, or returns ResourceExhausted with
// a RetryInfo detail (and the delay in the message) when it is empty.
func (l *registerLimiter) allow(addr string) error {
	if l.rate < 0 {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.mu.buckets[addr]
	if !ok {
		l.makeRoom(now)
		b = rate.NewLimiter(l.rate, l.burst)
		l.mu.buckets[addr] = b
	}
	r := b.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if r.OK() && delay == 0 {
		return nil
	}
	r.CancelAt(now)
	if !r.OK() {
		delay = time.Duration(float64(time.Second) / float64(l.rate))
	}
	// Rounded up: a client retrying at the hint must find a token.
	delay = (delay + retryGrain - 1).Truncate(retryGrain)
	st := status.Newf(codes.ResourceExhausted,
		"registration rate limit: address %s made more than %d registrations at once or more than %s on average "+
			"(--register-burst, --register-rate); retry after %s", addr, l.burst, describeRate(l.rate), delay)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = d
	}
	return st.Err()
}

// retryGrain is the resolution of a retry-after hint.
const retryGrain = 100 * time.Millisecond

// describeRate reads "2 per second" or "1 every 1m0s".
func describeRate(r rate.Limit) string {
	if r >= 1 {
		return fmt.Sprintf("%g per second", float64(r))
	}
	return fmt.Sprintf("1 every %s", time.Duration(float64(time.Second)/float64(r)).Round(time.Millisecond))
}

// makeRoom forgets buckets when the map is full: first the full ones (an
// address that has not registered for burst/rate is as good as new), then,
// if none is, an arbitrary one. Callers hold l.mu.
func (l *registerLimiter) makeRoom(now time.Time) {
	if len(l.mu.buckets) < l.max {
		return
	}
	for k, b := range l.mu.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.mu.buckets, k)
		}
	}
	for k := range l.mu.buckets {
		if len(l.mu.buckets) < l.max {
			return
		}
		delete(l.mu.buckets, k)
	}
}

// sources returns how many addresses have a bucket (tests).
func (l *registerLimiter) sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.buckets)
}
