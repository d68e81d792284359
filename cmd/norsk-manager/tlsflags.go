package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// tlsOptions are the daemon's TLS flags (docs/design/security.md).
type tlsOptions struct {
	cert, key, ca string
	workerName    string
	peerName      string
}

func (o *tlsOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.cert, "tls-cert", "", "TLS: the manager's certificate (PEM; from \"norsk-manager tls cert create --server\"): the API serves TLS only, plaintext clients are refused. Re-read on SIGHUP and when the file changes")
	f.StringVar(&o.key, "tls-key", "", "TLS: the private key of --tls-cert (PEM)")
	f.StringVar(&o.ca, "tls-ca", "", "TLS: the cluster CA (PEM bundle). With it API clients must present a certificate it signed (mutual TLS), "+
		"and the manager dials workers with TLS and checks their certificates against it and --tls-worker-name")
	f.StringVar(&o.peerName, "tls-peer-name", pki.RoleName(pki.RoleServer, pki.DefaultDomain),
		"TLS, in a cluster: the name every manager's certificate must carry on the Raft and actor ports, which use mutual TLS with --tls-cert/--tls-key and --tls-ca "+
			"(server.DOMAIN of \"tls cert create --server --domain DOMAIN\"): a worker's or client's certificate of the same CA is refused there")
	f.StringVar(&o.workerName, "tls-worker-name", pki.RoleName(pki.RoleWorker, pki.DefaultDomain),
		"TLS, with --tls-ca: the name a worker's certificate must carry (worker.DOMAIN of \"tls cert create --worker --domain DOMAIN\")")
}

// given reports whether any TLS flag asks for TLS.
func (o *tlsOptions) given() bool { return o.cert != "" || o.key != "" || o.ca != "" }

// config loads the certificates (a usage error naming the flag if they
// cannot be) and returns the agent's TLS configuration; the zero value
// without TLS flags.
func (o *tlsOptions) config(log *slog.Logger) (agent.TLSConfig, error) {
	if !o.given() {
		return agent.TLSConfig{}, nil
	}
	switch {
	case o.cert == "" || o.key == "":
		return agent.TLSConfig{}, usagef("--tls-cert and --tls-key go together (and --tls-ca needs both): the manager's certificate and its key")
	case o.workerName == "":
		return agent.TLSConfig{}, usagef("--tls-worker-name must not be empty")
	case o.peerName == "":
		return agent.TLSConfig{}, usagef("--tls-peer-name must not be empty")
	}
	certs, err := pki.NewReloader(pki.ReloaderConfig{
		Files:  pki.Files{Cert: o.cert, Key: o.key, CA: o.ca},
		Name:   "api",
		Logger: log.With("component", "tls"),
	})
	if err != nil {
		return agent.TLSConfig{}, usagef("--tls-cert/--tls-key/--tls-ca: %v", err)
	}
	return agent.TLSConfig{Certs: certs, WorkerName: o.workerName, PeerName: o.peerName}, nil
}

// watchTLS keeps certs current until ctx ends: it re-reads the files on
// SIGHUP (logging the outcome) and when they change (certs.Run). The
// returned function stops it and waits. A nil certs does nothing.
func watchTLS(ctx context.Context, log *slog.Logger, certs *pki.Reloader) (stop func()) {
	if certs == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		certs.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				changed, err := certs.Reload()
				switch {
				case err != nil:
					log.Error("sighup: tls certificate reload failed; the previous certificates stay in use", "error", err)
				case !changed:
					log.Info("sighup: tls certificate files unchanged")
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}
