package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// dialTracker is the connection's dialer: it records the outcome of the
// last connection attempt to each manager address, so that a call that
// reaches no manager can say what was tried.
type dialTracker struct {
	// plaintext: the connection has no TLS, so a peer that closes it
	// unanswered may be a manager serving TLS (said in the status).
	plaintext bool
	mu        sync.Mutex
	last      map[string]AddrStatus // guarded by mu
}

func newDialTracker(plaintext bool) *dialTracker {
	return &dialTracker{plaintext: plaintext, last: map[string]AddrStatus{}}
}

// dial connects to addr over TCP (gRPC's default, without proxy support)
// and records the outcome.
func (d *dialTracker) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		d.record(addr, AddrStatus{Err: dialCause(err)})
		return nil, err
	}
	d.record(addr, AddrStatus{Connected: true})
	return &trackedConn{Conn: c, d: d, addr: addr}, nil
}

// dialCause is the text of a dial error without the "dial tcp ADDR: "
// that net adds (the address is named beside it): "connect: connection
// refused", "i/o timeout", "lookup m1: no such host".
func dialCause(err error) string {
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

func (d *dialTracker) record(addr string, s AddrStatus) {
	s.Addr = addr
	d.mu.Lock()
	d.last[addr] = s
	d.mu.Unlock()
}

// statuses returns the last outcome of each of addrs, in order.
func (d *dialTracker) statuses(addrs []string) []AddrStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]AddrStatus, len(addrs))
	for i, a := range addrs {
		s, ok := d.last[a]
		if !ok {
			s = AddrStatus{Addr: a}
		}
		out[i] = s
	}
	return out
}

// trackedConn records a connection that ends before the peer sent a byte
// (a port that is not a manager's, a manager refusing the connection).
type trackedConn struct {
	net.Conn
	d        *dialTracker
	addr     string
	answered atomic.Bool
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	} else if err != nil && !c.answered.Load() {
		msg := "connection closed before the manager answered: " + err.Error()
		if c.d.plaintext {
			msg += " (a manager serving TLS closes plaintext connections: connect with TLS settings, norsk-ctl --ca-cert)"
		}
		c.d.record(c.addr, AddrStatus{Err: msg})
	}
	return n, err
}
