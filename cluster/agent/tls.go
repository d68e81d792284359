package agent

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// TLSConfig secures the manager's API and its links to workers
// (docs/design/security.md). The zero value is plaintext everywhere, as
// before TLS existed.
type TLSConfig struct {
	// Certs holds the manager's certificate pair (a pki.RoleServer
	// certificate) and, optionally, the cluster CA. Nil: no TLS. With a
	// pair the API serves TLS only: a plaintext client is refused. With a
	// CA too, API clients must present a certificate the CA signed
	// (mutual TLS), managers forwarding to each other present theirs, and
	// the manager dials workers with TLS, verifying their certificates
	// against the CA and WorkerName. The pair and the CA are re-read on
	// Certs.Reload (the caller runs Certs.Run or calls Reload on SIGHUP);
	// new connections use the new ones.
	Certs *pki.Reloader
	// WorkerName is the name a worker's certificate must carry for the
	// dial-back. Default pki.RoleName(pki.RoleWorker, pki.DefaultDomain),
	// "worker.norsk".
	WorkerName string
	// PeerName is the name another manager's certificate must carry on
	// the Raft and actor ports, both ways (tls_peers.go). Default
	// pki.RoleName(pki.RoleServer, pki.DefaultDomain), "server.norsk",
	// which every server certificate of "norsk-manager tls cert create
	// --server" carries.
	PeerName string
}

// enabled reports whether the API serves TLS.
func (c TLSConfig) enabled() bool { return c.Certs != nil && c.Certs.HasCert() }

// mutual reports whether peers must present certificates of the CA: API
// clients, and workers when dialled back.
func (c TLSConfig) mutual() bool { return c.enabled() && c.Certs.HasCA() }

func (c TLSConfig) workerName() string {
	if c.WorkerName != "" {
		return c.WorkerName
	}
	return pki.RoleName(pki.RoleWorker, pki.DefaultDomain)
}

// serverOption is the API server's transport option: TLS (mutual with a
// CA) or none (plaintext).
func (c TLSConfig) serverOptions() []grpc.ServerOption {
	if !c.enabled() {
		return nil
	}
	// With a CA a client certificate is asked for and verified if given;
	// checkClientCert (clientcert_guard.go) refuses every call but the
	// registration from a connection that gave none.
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(c.Certs.ServerConfigClientCertIfGiven()))}
}

// managerCreds are the transport credentials for dialling another
// manager's API (the internal Cluster service): TLS with this manager's
// certificate as client certificate, verifying the other's against the CA
// and the host it is dialled at, when the API serves TLS.
func (c TLSConfig) managerCreds() credentials.TransportCredentials {
	if !c.enabled() {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(c.Certs.ClientConfig())
}

// workerDialOptions are added to every dial of a worker: with a CA, TLS
// verifying the worker's certificate against it and WorkerName (the
// authority gRPC checks it for), and presenting this manager's certificate
// if the worker asks for one.
func (c TLSConfig) workerDialOptions() []grpc.DialOption {
	if !c.mutual() {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(c.Certs.ClientConfig())),
		grpc.WithAuthority(c.workerName()),
	}
}

// pinnedWorkerDialOptions are added after workerDialOptions to the dial
// of a worker whose record pins its self-signed certificate (sha256, the
// certificate's fingerprint; actors/node certpin.go): TLS that accepts
// that certificate only, presenting this manager's certificate if it has
// one and the worker asks. Used whatever the manager's own TLS: a pinned
// worker serves TLS.
func (c TLSConfig) pinnedWorkerDialOptions(sha256 []byte) []grpc.DialOption {
	var cfg *tls.Config
	if c.enabled() {
		cfg = c.Certs.PinnedClientConfig(sha256)
	} else {
		cfg = pki.PinnedClientConfig(sha256, nil)
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithAuthority(c.workerName())}
}

// registerTLSGauges adds the expiry of the API certificate to the metrics.
func (a *Agent) registerTLSGauges() {
	certs := a.cfg.TLS.Certs
	if !a.cfg.TLS.enabled() {
		return
	}
	a.metrics.gauge("norsk_manager_tls_cert_expiry_seconds",
		"Seconds until the API's TLS certificate (the one last loaded) expires; negative once it has. Alert well ahead (the manager warns at 14 days).",
		func() float64 { return time.Until(certs.NotAfter()).Seconds() })
}
