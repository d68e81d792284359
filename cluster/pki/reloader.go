package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of ReloaderConfig.
const (
	// DefaultWarnBefore is how long before its expiry a loaded certificate
	// is warned about (Nomad and cert-manager renew at two thirds of the
	// lifetime; a year-long certificate warned 14 days ahead leaves two
	// weeks to act).
	DefaultWarnBefore = 14 * 24 * time.Hour
	// DefaultPollInterval is how often Run looks at the files.
	DefaultPollInterval = 10 * time.Second
	// warnEvery repeats the expiry warning while it holds.
	warnEvery = 24 * time.Hour
)

// Files names the PEM files of one side of a TLS link.
type Files struct {
	// Cert is the certificate (optionally followed by its intermediates)
	// and Key its private key: both or neither.
	Cert, Key string
	// CA is the bundle of CA certificates that verify the peer. Optional:
	// without it a server asks for no client certificate and a client
	// verifies the server with the system's roots.
	CA string
}

// ReloaderConfig configures NewReloader.
type ReloaderConfig struct {
	Files
	// Name says what the certificates secure ("api", "worker"), in logs.
	Name string
	// WarnBefore: a certificate that expires within this is logged at WARN
	// when loaded and then daily, by Run. Default DefaultWarnBefore.
	WarnBefore time.Duration
	// PollInterval is how often Run checks the files for changes. Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Now returns the current time; nil is time.Now.
	Now func() time.Time
}

// Reloader holds the certificate pair and CA bundle last loaded from Files
// and hands them to every new TLS handshake, so that replacing the files
// (and calling Reload, or letting Run notice) renews the certificate for
// new connections without a restart. Connections already up keep theirs.
//
// A Reloader is safe for concurrent use. A reload that fails (a missing
// file, a key that does not match the certificate — one file replaced and
// not yet the other) keeps what was loaded before.
type Reloader struct {
	cfg ReloaderConfig
	log *slog.Logger
	cur atomic.Pointer[loaded]

	mu struct {
		sync.Mutex
		failed   string    // the error of the last failed attempt, logged once
		lastWarn time.Time // when the expiry warning was last logged
	}
}

// loaded is one consistent load of the files. Never modified once stored.
type loaded struct {
	certPEM, keyPEM, caPEM []byte
	cert                   *tls.Certificate // nil without Cert
	leaf                   *x509.Certificate
	pool                   *x509.CertPool // nil without CA
	// serverCfg and mutualCfg are what ServerConfig hands to handshakes
	// (without and with client certificates required), optionalCfg what
	// ServerConfigClientCertIfGiven does; nil without cert.
	serverCfg, mutualCfg, optionalCfg *tls.Config
}

// NewReloader validates cfg and loads the files. It fails, naming the file
// and the reason, if Cert or Key is given without the other, nothing is
// given, a file cannot be read or parsed, or the key does not match the
// certificate (ErrKeyMismatch).
func NewReloader(cfg ReloaderConfig) (*Reloader, error) {
	if (cfg.Cert == "") != (cfg.Key == "") {
		return nil, errors.New("pki: a certificate needs its key and a key its certificate: give both or neither")
	}
	if cfg.Cert == "" && cfg.CA == "" {
		return nil, errors.New("pki: no certificate and no CA to load")
	}
	if cfg.WarnBefore <= 0 {
		cfg.WarnBefore = DefaultWarnBefore
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reloader{cfg: cfg, log: cfg.Logger.With("tls", cfg.Name)}
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(l)
	r.logLoaded(l, "tls certificates loaded")
	return r, nil
}

// Reload re-reads the files. It reports whether anything changed; on an
// error the previous certificates stay in use. Call it on SIGHUP.
func (r *Reloader) Reload() (bool, error) {
	l, err := r.load()
	if err != nil {
		return false, err
	}
	old := r.cur.Load()
	if bytes.Equal(old.certPEM, l.certPEM) && bytes.Equal(old.keyPEM, l.keyPEM) && bytes.Equal(old.caPEM, l.caPEM) {
		return false, nil
	}
	r.cur.Store(l)
	r.mu.Lock()
	r.mu.failed, r.mu.lastWarn = "", time.Time{}
	r.mu.Unlock()
	r.logLoaded(l, "tls certificates reloaded")
	return true, nil
}

// Run checks the files every PollInterval, reloads them when their content
// changed, logs a failed reload once per distinct error (at ERROR: the old
// certificates stay in use), and warns about a certificate close to expiry
// daily. It returns when ctx ends.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.poll()
		}
	}
}

func (r *Reloader) poll() {
	_, err := r.Reload()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != r.mu.failed {
			r.mu.failed = msg
			r.log.Error("tls certificate reload failed; the previous certificates stay in use", "error", err)
		}
		return
	}
	r.mu.failed = ""
	if now := r.cfg.Now(); now.Sub(r.mu.lastWarn) >= warnEvery {
		if r.warnExpiry(r.cur.Load(), now) {
			r.mu.lastWarn = now
		}
	}
}

// load reads and checks the files.
func (r *Reloader) load() (*loaded, error) {
	l := &loaded{}
	var err error
	if r.cfg.Cert != "" {
		if l.certPEM, err = os.ReadFile(r.cfg.Cert); err != nil {
			return nil, fmt.Errorf("pki: certificate: %w", err)
		}
		if l.keyPEM, err = os.ReadFile(r.cfg.Key); err != nil {
			return nil, fmt.Errorf("pki: key: %w", err)
		}
		if err := checkPair(l.certPEM, l.keyPEM); err != nil {
			return nil, fmt.Errorf("%w (%s, %s)", err, r.cfg.Cert, r.cfg.Key)
		}
		pair, err := tls.X509KeyPair(l.certPEM, l.keyPEM)
		if err != nil {
			return nil, fmt.Errorf("pki: %s and %s: %w", r.cfg.Cert, r.cfg.Key, err)
		}
		l.cert, l.leaf = &pair, pair.Leaf
	}
	if r.cfg.CA != "" {
		if l.caPEM, err = os.ReadFile(r.cfg.CA); err != nil {
			return nil, fmt.Errorf("pki: CA: %w", err)
		}
		l.pool = x509.NewCertPool()
		if !l.pool.AppendCertsFromPEM(l.caPEM) {
			return nil, fmt.Errorf("%w: %s holds no CA certificate", ErrBadPEM, r.cfg.CA)
		}
	}
	l.serverConfigs()
	return l, nil
}

func (r *Reloader) logLoaded(l *loaded, msg string) {
	if l.leaf == nil {
		r.log.Info(msg, "ca", r.cfg.CA)
		return
	}
	r.log.Info(msg, "cert", r.cfg.Cert, "subject", l.leaf.Subject.CommonName, "serial", l.leaf.SerialNumber.Text(16),
		"not_after", l.leaf.NotAfter.UTC().Format(time.RFC3339), "ca", r.cfg.CA)
	now := r.cfg.Now()
	if r.warnExpiry(l, now) {
		r.mu.Lock()
		r.mu.lastWarn = now
		r.mu.Unlock()
	}
}

// warnExpiry logs a certificate that has expired or expires within
// WarnBefore, and reports whether it did.
func (r *Reloader) warnExpiry(l *loaded, now time.Time) bool {
	if l.leaf == nil {
		return false
	}
	left := l.leaf.NotAfter.Sub(now)
	switch {
	case left <= 0:
		r.log.Error("tls certificate has expired: peers refuse it; renew it (norsk-manager tls cert create) and replace the files",
			"cert", r.cfg.Cert, "not_after", l.leaf.NotAfter.UTC().Format(time.RFC3339))
	case left < r.cfg.WarnBefore:
		r.log.Warn("tls certificate expires soon: renew it and replace the files (reloaded without a restart)",
			"cert", r.cfg.Cert, "not_after", l.leaf.NotAfter.UTC().Format(time.RFC3339), "left", left.Round(time.Minute).String())
	default:
		return false
	}
	return true
}

// Leaf returns the certificate last loaded (nil without Cert). The caller
// must not modify it.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().leaf }

// NotAfter returns the expiry of the certificate last loaded (zero without
// Cert).
func (r *Reloader) NotAfter() time.Time {
	if l := r.cur.Load().leaf; l != nil {
		return l.NotAfter
	}
	return time.Time{}
}

// HasCert reports whether the Reloader holds a certificate pair (Files.Cert
// was given).
func (r *Reloader) HasCert() bool { return r.cfg.Cert != "" }

// HasCA reports whether the Reloader holds a CA bundle (Files.CA was
// given).
func (r *Reloader) HasCA() bool { return r.cfg.CA != "" }

// Files returns the files the Reloader reads.
func (r *Reloader) Files() Files { return r.cfg.Files }

// checkPair returns ErrKeyMismatch if the key of keyPEM is not the one of
// the first certificate of certPEM; it leaves every other problem to
// tls.X509KeyPair.
func checkPair(certPEM, keyPEM []byte) error {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return err
	}
	pub, ok := publicOf(keyPEM)
	if !ok {
		return nil
	}
	if eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool }); ok && !eq.Equal(cert.PublicKey) {
		return ErrKeyMismatch
	}
	return nil
}

// publicOf returns the public key of the first private key in keyPEM
// (SEC 1 EC, PKCS #8 or PKCS #1 RSA), false if there is none it can parse.
func publicOf(keyPEM []byte) (crypto.PublicKey, bool) {
	for {
		var blk *pem.Block
		blk, keyPEM = pem.Decode(keyPEM)
		if blk == nil {
			return nil, false
		}
		var k any
		var err error
		switch blk.Type {
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, false
		}
		if s, ok := k.(crypto.Signer); ok {
			return s.Public(), true
		}
		return nil, false
	}
}
