package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// PeerTLS secures the Raft transport with mutual TLS
// (docs/design/security.md, "Raft and actor ports"). Both fields are
// required; the manager builds them from its one TLS configuration
// (agent.TLSConfig).
type PeerTLS struct {
	// Server is the configuration of every accepted connection. It must
	// require and verify the dialler's certificate (pki's
	// PeerServerConfig): this layer adds no check of its own.
	Server *tls.Config
	// Client returns the configuration of one outgoing connection (called
	// per dial, so a reloaded CA bundle is used by the next connection).
	// It must verify the other manager's certificate and name it
	// (ServerName) and present this manager's.
	Client func() *tls.Config
}

// Limits of the TLS stream layer.
const (
	// tlsHandshakeTimeout bounds one handshake, either side: a peer that
	// connects and says nothing is dropped after it.
	tlsHandshakeTimeout = 10 * time.Second
	// maxPendingHandshakes bounds the handshakes in progress on the
	// listener; a connection beyond it is closed at once (a flood of
	// connections costs goroutines only up to this). Raft peers open a
	// handful of connections each.
	maxPendingHandshakes = 64
	// refusalLogEvery: refused connections from one host are logged at
	// WARN once in this, at DEBUG otherwise.
	refusalLogEvery = time.Minute
)

// tlsStreamLayer is a raft.StreamLayer over TLS. Accept hands raft only
// connections whose handshake succeeded: each accepted TCP connection
// shakes hands in a goroutine of its own (bounded by
// maxPendingHandshakes), so a peer that stalls its handshake holds up no
// other, and a refused one is logged here, naming the peer and the
// reason, instead of surfacing as a decode error inside raft.
type tlsStreamLayer struct {
	lis       net.Listener
	advertise net.Addr
	cfg       PeerTLS
	log       *slog.Logger

	acceptCh chan net.Conn // handshaken connections for Accept
	pending  chan struct{} // a token per handshake in progress
	ctx      context.Context
	cancel   context.CancelFunc // closes the layer: ends Accept and handshakes
	wg       sync.WaitGroup     // the accept loop and handshakes

	mu struct {
		sync.Mutex
		warned map[string]time.Time // remote host → last WARN of a refusal
	}
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// newTLSStreamLayer listens on bindAddr and advertises advertise. Errors:
// a missing configuration, the listen error, or an advertise address that
// is not a usable TCP address (as raft's TCP transport refuses).
func newTLSStreamLayer(bindAddr string, advertise *net.TCPAddr, cfg PeerTLS, log *slog.Logger) (*tlsStreamLayer, error) {
	if cfg.Server == nil || cfg.Client == nil {
		return nil, errors.New("replication: PeerTLS needs both Server and Client")
	}
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("replication: advertise address %s is not one other managers can dial", advertise)
	}
	lis, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &tlsStreamLayer{
		lis: lis, advertise: advertise, cfg: cfg, log: log,
		acceptCh: make(chan net.Conn), pending: make(chan struct{}, maxPendingHandshakes),
		ctx: ctx, cancel: cancel,
	}
	l.mu.warned = map[string]time.Time{}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// acceptLoop accepts TCP connections until the listener closes and starts
// a handshake for each.
func (l *tlsStreamLayer) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		raw, err := l.lis.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: back off as
			// net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.log.Warn("raft tls: accept failed", "error", err, "retry_in", delay)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		select {
		case l.pending <- struct{}{}:
		default:
			l.log.Warn("raft tls: too many handshakes in progress: connection closed", "remote", raw.RemoteAddr().String(), "limit", maxPendingHandshakes)
			_ = raw.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(raw)
	}
}

// handshake completes the server side of raw's TLS handshake within
// tlsHandshakeTimeout and hands the connection to Accept, or logs the
// refusal and closes it.
func (l *tlsStreamLayer) handshake(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.pending }()
	conn := tls.Server(raw, l.cfg.Server)
	ctx, cancel := context.WithTimeout(l.ctx, tlsHandshakeTimeout)
	err := conn.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = conn.Close()
		if l.ctx.Err() == nil {
			l.logRefusal(raw.RemoteAddr(), err)
		}
		return
	}
	select {
	case l.acceptCh <- conn:
	case <-l.ctx.Done():
		_ = conn.Close()
	}
}

// logRefusal logs a refused connection: at WARN the first time from a
// host in refusalLogEvery, at DEBUG otherwise (a rogue that retries
// does not flood the log).
func (l *tlsStreamLayer) logRefusal(remote net.Addr, err error) {
	host, _, splitErr := net.SplitHostPort(remote.String())
	if splitErr != nil {
		host = remote.String()
	}
	now := time.Now()
	l.mu.Lock()
	last, seen := l.mu.warned[host]
	warn := !seen || now.Sub(last) >= refusalLogEvery
	if warn {
		l.mu.warned[host] = now
		for h, t := range l.mu.warned { // keep the map small
			if now.Sub(t) >= refusalLogEvery {
				delete(l.mu.warned, h)
			}
		}
	}
	l.mu.Unlock()
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level,
		"raft tls: connection refused: the peer presented no certificate of the cluster CA carrying the managers' name, or none at all",
		"remote", remote.String(), "error", err)
}

// Accept returns the next connection whose TLS handshake succeeded, or
// net.ErrClosed once the layer is closed.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.acceptCh:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting, aborts the handshakes in progress and waits for
// them. Connections already handed to raft are raft's to close. It is
// idempotent.
func (l *tlsStreamLayer) Close() error {
	l.cancel()
	err := l.lis.Close()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Addr returns the advertised address (raft's LocalAddr).
func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to address and completes the TLS handshake within
// timeout: a peer whose certificate the configuration refuses is an
// error here, before raft sends anything.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	defer cancel()
	return l.dial(ctx, address)
}

func (l *tlsStreamLayer) dial(ctx context.Context, address raft.ServerAddress) (net.Conn, error) {
	d := tls.Dialer{Config: l.cfg.Client()}
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raft tls: dial %s: %w", address, err)
	}
	return c, nil
}

// probe reports whether a manager answers at address with a certificate
// this layer accepts, and has accepted this one's: a TLS handshake, then
// a read that waits until the other side either refuses this manager's
// certificate (TLS 1.3 reports that after the client's handshake ends) or
// stays quiet for probeQuietFor.
func (l *tlsStreamLayer) probe(ctx context.Context, address raft.ServerAddress) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := l.dial(ctx, address)
	if err != nil {
		return err
	}
	defer c.Close()
	// Raft's side of an accepted connection waits for a command and never
	// writes first: a read that times out means it accepted us.
	_ = c.SetReadDeadline(time.Now().Add(probeQuietFor))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return fmt.Errorf("raft tls: %s sent data unasked: not a raft transport", address)
	}
	return fmt.Errorf("raft tls: %s refused this manager: %w", address, err)
}

// Probe timings.
const (
	probeTimeout  = 2 * time.Second
	probeQuietFor = 500 * time.Millisecond
)
