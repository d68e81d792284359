package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/worker"
)

// Names of the TLS flags of every command (persistent) and their
// environment variables, as Nomad's NOMAD_CACERT and friends.
const (
	ctlFlagCACert        = "ca-cert"
	ctlFlagClientCert    = "client-cert"
	ctlFlagClientKey     = "client-key"
	ctlFlagTLSServerName = "tls-server-name"
	ctlEnvCACert         = "NORSK_CACERT"
	ctlEnvClientCert     = "NORSK_CLIENT_CERT"
	ctlEnvClientKey      = "NORSK_CLIENT_KEY"
	ctlEnvTLSServerName  = "NORSK_TLS_SERVER_NAME"
)

// addTLSFlags adds the TLS flags of the connection to the managers to
// root's persistent flags (for the operator commands and --mode=worker).
func addTLSFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.String(ctlFlagCACert, "", "TLS: CA certificate (PEM) that signed the managers' certificates; connects with TLS and verifies the manager (env "+ctlEnvCACert+")")
	pf.String(ctlFlagClientCert, "", "TLS: client certificate (PEM) for a manager that requires one (--tls-ca); not in worker mode, which presents --tls-cert (env "+ctlEnvClientCert+")")
	pf.String(ctlFlagClientKey, "", "TLS: private key of --client-cert (env "+ctlEnvClientKey+")")
	pf.String(ctlFlagTLSServerName, "", "TLS: the name the managers' certificates must carry (e.g. server.norsk), instead of the host of each --manager-url entry (env "+ctlEnvTLSServerName+")")
}

// ctlFlagOrEnv is the value of flag name: given on the command line, else
// env, else the flag's default.
func ctlFlagOrEnv(cmd *cobra.Command, name, env string) string {
	f := cmd.Flag(name)
	if f == nil {
		return os.Getenv(env)
	}
	if v := os.Getenv(env); v != "" && !f.Changed {
		return v
	}
	return f.Value.String()
}

// ctlTLSFiles reads the TLS flags of cmd (with their environment
// defaults).
func ctlTLSFiles(cmd *cobra.Command) client.TLSFiles {
	return client.TLSFiles{
		CACert:     ctlFlagOrEnv(cmd, ctlFlagCACert, ctlEnvCACert),
		ClientCert: ctlFlagOrEnv(cmd, ctlFlagClientCert, ctlEnvClientCert),
		ClientKey:  ctlFlagOrEnv(cmd, ctlFlagClientKey, ctlEnvClientKey),
		ServerName: ctlFlagOrEnv(cmd, ctlFlagTLSServerName, ctlEnvTLSServerName),
	}
}

// ctlTLSConfig is the TLS configuration of an operator command: nil
// (plaintext) when no TLS flag or variable is set; a usage error naming
// the flags when the files cannot be used.
func ctlTLSConfig(cmd *cobra.Command) (*tls.Config, error) {
	f := ctlTLSFiles(cmd)
	if f == (client.TLSFiles{}) {
		return nil, nil
	}
	cfg, err := f.Config()
	if err != nil {
		return nil, ctlUsagef("--%s/--%s/--%s: %v", ctlFlagCACert, ctlFlagClientCert, ctlFlagClientKey, err)
	}
	return cfg, nil
}

// workerTLS is the worker's TLS material: its certificate (--tls-cert,
// --tls-key) and the CA (--ca-cert).
type workerTLS struct {
	cert, key  string          // worker-mode flags
	selfSigned bool            // --self-signed
	files      client.TLSFiles // the persistent flags, read at run time
	clientFlag bool            // --client-cert or --client-key was given
}

// addWorkerTLSFlags adds the worker-only TLS flags to cmd.
func addWorkerTLSFlags(cmd *cobra.Command, o *workerTLS) {
	f := cmd.Flags()
	f.StringVar(&o.cert, "tls-cert", "", "worker mode: the worker's certificate (PEM; \"norsk-manager tls cert create --worker\"): the port the manager dials back serves TLS only, "+
		"and the certificate is presented when registering. With --ca-cert too, only managers presenting a certificate of that CA may open a session. Re-read on SIGHUP and when the file changes")
	f.StringVar(&o.key, "tls-key", "", "worker mode: the private key of --tls-cert (PEM)")
	f.BoolVar(&o.selfSigned, "self-signed", false, "worker mode: serve the port the manager dials back with TLS, using a key and self-signed certificate the worker makes "+
		"at its first start and keeps in --state-dir ("+worker.SelfSignedCertFile+", mode 0600). The certificate's SHA-256 is sent with the registration "+
		"and the manager accepts only it when dialling back, instead of a certificate of its CA: for cloud workers, whose user data carries no key. "+
		"The certificate is not presented when registering (the registration token authenticates). Losing the file means a new slot and token. Not with --tls-cert")
}

// loadSelfSigned makes or loads the worker's self-signed certificate in
// stateDir, and returns the reloader serving it (verifying managers'
// client certificates against --ca-cert, if given), the TLS of the
// registrations (which present no certificate; nil: plaintext, as without
// --self-signed) and the certificate's SHA-256.
func (o *workerTLS) loadSelfSigned(logger *slog.Logger, stateDir string) (certs *pki.Reloader, manager *tls.Config, sha []byte, err error) {
	if o.cert != "" || o.key != "" {
		return nil, nil, nil, fmt.Errorf("--self-signed and --tls-cert/--tls-key exclude each other: the worker serves either its own self-signed certificate or one of the cluster CA")
	}
	// The CA first: a bad --ca-cert must not leave a key behind.
	switch {
	case o.files.CACert != "":
		trust, err := pki.NewReloader(pki.ReloaderConfig{Files: pki.Files{CA: o.files.CACert}, Name: "managers"})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--%s: %w", ctlFlagCACert, err)
		}
		manager = trust.ClientConfig()
		manager.ServerName = o.files.ServerName
	case o.files.ServerName != "":
		manager = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.files.ServerName}
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("--self-signed: --state-dir: %w", err)
	}
	ss, err := pki.LoadOrCreateSelfSigned(filepath.Join(stateDir, worker.SelfSignedCertFile), pki.RoleName(pki.RoleWorker, pki.DefaultDomain), nil)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--self-signed: %w", err)
	}
	logger.Info("self-signed worker certificate", "file", ss.Path, "sha256", pki.FormatFingerprint(ss.Fingerprint), "created", ss.Created)
	certs, err = pki.NewReloader(pki.ReloaderConfig{
		Files: pki.Files{Cert: ss.Path, Key: ss.Path, CA: o.files.CACert}, Name: "worker", Logger: logger.With("component", "tls"),
		// Pinned: its validity is not checked, so nothing to warn about.
		WarnBefore: time.Nanosecond,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--self-signed/--%s: %w", ctlFlagCACert, err)
	}
	return certs, manager, ss.Fingerprint, nil
}

// read takes the persistent TLS flags of cmd.
func (o *workerTLS) read(cmd *cobra.Command) {
	o.files = ctlTLSFiles(cmd)
	o.clientFlag = cmd.Flags().Changed(ctlFlagClientCert) || cmd.Flags().Changed(ctlFlagClientKey)
}

// load loads the worker's certificates: the TLS of its server (nil: plaintext)
// and of its registrations (nil: plaintext), and the reloader to keep current
// (nil without certificates). With --self-signed it sets cfg.CertSHA256.
// Errors name the flags.
func (o *workerTLS) load(logger *slog.Logger, cfg *worker.Config) (server, manager *tls.Config, certs *pki.Reloader, err error) {
	if o.clientFlag {
		return nil, nil, nil, fmt.Errorf("--%s/--%s are for the operator commands: a worker presents its --tls-cert when it registers", ctlFlagClientCert, ctlFlagClientKey)
	}
	if o.selfSigned {
		certs, manager, cfg.CertSHA256, err = o.loadSelfSigned(logger, cfg.StateDir)
		if err != nil {
			return nil, nil, nil, err
		}
		return certs.ServerConfig(true), manager, certs, nil
	}
	if (o.cert == "") != (o.key == "") {
		return nil, nil, nil, fmt.Errorf("--tls-cert and --tls-key go together: the worker's certificate and its key")
	}
	if o.cert == "" && o.files.CACert == "" {
		if o.files.ServerName == "" {
			return nil, nil, nil, nil // plaintext
		}
		// Only a server name: TLS with the system's roots.
		return nil, &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.files.ServerName}, nil, nil
	}
	certs, err = pki.NewReloader(pki.ReloaderConfig{
		Files:  pki.Files{Cert: o.cert, Key: o.key, CA: o.files.CACert},
		Name:   "worker",
		Logger: logger.With("component", "tls"),
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--tls-cert/--tls-key/--%s: %w", ctlFlagCACert, err)
	}
	manager = certs.ClientConfig()
	manager.ServerName = o.files.ServerName
	if o.cert != "" {
		server = certs.ServerConfig(true)
	}
	return server, manager, certs, nil
}

// watchWorkerTLS re-reads the worker's certificates on SIGHUP and when the
// files change, until ctx ends; it returns at once for nil certs. The
// caller runs it in a goroutine it waits for.
func watchWorkerTLS(ctx context.Context, logger *slog.Logger, certs *pki.Reloader) {
	if certs == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan struct{})
	go func() {
		defer close(done)
		certs.Run(ctx)
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if changed, err := certs.Reload(); err != nil {
				logger.Error("sighup: tls certificate reload failed; the previous certificates stay in use", "error", err)
			} else if !changed {
				logger.Info("sighup: tls certificate files unchanged")
			}
		}
	}
}
