package pki

import (
	"crypto/tls"
	"errors"
)

// ErrNoCertificate is returned by a server handshake of a Reloader that
// holds no certificate pair (only a CA).
var ErrNoCertificate = errors.New("pki: no certificate loaded to serve with")

// ServerConfig returns the tls.Config of a server (the manager's API, a
// worker's dial-back port). Every handshake takes the pair and CA bundle
// last loaded. With requireClientCert and a CA, clients must present a
// certificate the CA signed with client authentication in its extended key
// usages (mutual TLS); otherwise none is asked for. TLS 1.2 at least; ALPN
// "h2" (gRPC).
func (r *Reloader) ServerConfig(requireClientCert bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := r.cur.Load()
			if l.cert == nil {
				return nil, ErrNoCertificate
			}
			if requireClientCert {
				return l.mutualCfg, nil
			}
			return l.serverCfg, nil
		},
	}
}

// ServerConfigClientCertIfGiven is ServerConfig(true) except that a
// client may also connect without a certificate (a certificate it does
// present must still be one the CA signed): the manager's API with mutual
// TLS, where a worker registering with a self-signed certificate has none
// and an interceptor admits such a connection to the registration only
// (docs/design/security.md, "Cloud workers"). Without a CA it is
// ServerConfig(false).
func (r *Reloader) ServerConfigClientCertIfGiven() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := r.cur.Load()
			if l.cert == nil {
				return nil, ErrNoCertificate
			}
			return l.optionalCfg, nil
		},
	}
}

// serverConfigs builds l's two server configurations once per load rather
// than once per handshake. Handshakes must not modify them (gRPC clones
// the Config it is given before adding its defaults).
func (l *loaded) serverConfigs() {
	if l.cert == nil {
		return
	}
	l.serverCfg = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{*l.cert},
	}
	l.mutualCfg = l.serverCfg.Clone()
	l.optionalCfg = l.serverCfg.Clone()
	if l.pool != nil {
		l.mutualCfg.ClientAuth = tls.RequireAndVerifyClientCert
		l.mutualCfg.ClientCAs = l.pool
		l.optionalCfg.ClientAuth = tls.VerifyClientCertIfGiven
		l.optionalCfg.ClientCAs = l.pool
	}
}

// ClientConfig returns the tls.Config of a client: the server is verified
// against the CA bundle loaded now (the system's roots without one), and
// the name in ServerName, which the caller sets (gRPC sets it to the
// authority of each connection, the host dialled; grpc.WithAuthority
// names another). If the server asks for a client certificate, the pair
// last loaded is presented (none without one), so a renewed client
// certificate is used by the next connection.
//
// The CA bundle is read when ClientConfig is called: a long-lived dialer
// built once sees a new CA bundle after its process restarts, while
// servers pick it up at reload.
func (r *Reloader) ClientConfig() *tls.Config {
	l := r.cur.Load()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    l.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if l := r.cur.Load(); l.cert != nil {
				return l.cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}
