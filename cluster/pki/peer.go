package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ErrNoCA is returned by a server handshake of a PeerServerConfig of a
// Reloader that holds no CA
// bundle: a peer link is never set up without verifying the other side.
var ErrNoCA = errors.New("pki: no CA loaded to verify peers with")

// PeerServerConfig returns the tls.Config of the server side of a link
// between managers (the Raft port, the actor port): every handshake takes
// the pair and CA bundle last loaded, requires a client certificate the CA
// signed with client authentication in its extended key usages, and
// refuses one that does not carry name (a DNS name of its subject
// alternative names, e.g. "server.norsk": a worker's or an operator's
// certificate of the same CA is not a manager's). nextProtos are the ALPN
// protocols offered ("h2" for gRPC; none for Raft). TLS 1.2 at least.
//
// A handshake fails with ErrNoCertificate without a pair and ErrNoCA
// without a CA bundle.
func (r *Reloader) PeerServerConfig(name string, nextProtos ...string) *tls.Config {
	verify := verifyPeerName(name)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := r.cur.Load()
			switch {
			case l.cert == nil:
				return nil, ErrNoCertificate
			case l.pool == nil:
				return nil, ErrNoCA
			}
			return &tls.Config{
				MinVersion:       tls.VersionTLS12,
				NextProtos:       nextProtos,
				Certificates:     []tls.Certificate{*l.cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        l.pool,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// PeerClientConfig returns the tls.Config of the dialling side of a link
// between managers: the other manager's certificate must chain to the CA
// bundle loaded now and carry name (ServerName is set to it, whatever
// address is dialled), and this manager presents the pair last loaded.
// Like ClientConfig, the CA bundle is read when PeerClientConfig is
// called: call it per connection (the Raft transport does) to follow a
// reloaded CA. Without a CA bundle it trusts nothing (never the system's
// roots: a public certificate is no manager's), so every handshake fails.
//
// gRPC replaces ServerName with the authority of the connection: dial
// with grpc.WithAuthority(name).
func (r *Reloader) PeerClientConfig(name string) *tls.Config {
	cfg := r.ClientConfig()
	cfg.ServerName = name
	if cfg.RootCAs == nil {
		cfg.RootCAs = x509.NewCertPool() // trusts nothing
	}
	return cfg
}

// verifyPeerName returns a tls.Config.VerifyConnection that refuses a peer
// whose leaf certificate (already verified against the CA) does not carry
// name.
func verifyPeerName(name string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("pki: the peer presented no certificate")
		}
		leaf := cs.PeerCertificates[0]
		if err := leaf.VerifyHostname(name); err != nil {
			return fmt.Errorf("pki: peer certificate %q is not a manager's: it does not carry %q (a server certificate of \"norsk-manager tls cert create --server\" does): %w",
				leaf.Subject.CommonName, name, err)
		}
		return nil
	}
}

// CAPEM returns the CA bundle last loaded, as PEM (nil without Files.CA):
// public material, e.g. for a cloud worker's user data. The caller must
// not modify it.
func (r *Reloader) CAPEM() []byte { return r.cur.Load().caPEM }
