package replication

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft transport settings: connections pooled per peer, and how long an
// RPC may take on one.
const (
	transportMaxPool = 3
	transportTimeout = 10 * time.Second
)

// newTransport builds the Raft network transport on cfg.BindAddr: over
// the TLS stream layer when cfg.TLS is set (returned too, for Probe),
// plain TCP otherwise.
func newTransport(cfg Config, adv *net.TCPAddr, hl hclog.Logger) (*raft.NetworkTransport, *tlsStreamLayer, error) {
	if cfg.TLS == nil {
		trans, err := raft.NewTCPTransportWithLogger(cfg.BindAddr, adv, transportMaxPool, transportTimeout, hl)
		return trans, nil, err
	}
	layer, err := newTLSStreamLayer(cfg.BindAddr, adv, *cfg.TLS, cfg.Logger.With("port", "raft"))
	if err != nil {
		return nil, nil, err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: transportMaxPool, Timeout: transportTimeout, Logger: hl,
	})
	return trans, layer, nil
}

// Probe reports whether another manager's Raft transport answers at addr
// (nil) or why not. Without TLS it is a TCP connect within 500 ms. With
// TLS the other side must complete a mutual TLS handshake: present a
// certificate this manager accepts and accept this manager's (the
// leader adds a member as a voter only then, so a process without a
// certificate of the cluster CA never becomes one). ctx bounds it, and
// so does a timeout of its own of about 2 s.
func (r *Replicator) Probe(ctx context.Context, addr string) error {
	if r.tls != nil {
		return r.tls.probe(ctx, raft.ServerAddress(addr))
	}
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("replication: raft address %s: %w", addr, err)
	}
	return conn.Close()
}

// TLS reports whether the Raft transport runs over mutual TLS.
func (r *Replicator) TLS() bool { return r.tls != nil }
