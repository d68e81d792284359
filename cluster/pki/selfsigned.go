package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// A self-signed worker certificate is how a cloud worker, whose user data
// must not carry a private key, serves its dial-back port with TLS
// (docs/design/security.md, "Cloud workers"): the worker makes its key at
// its first boot, keeps it in its state directory and sends the
// certificate's fingerprint when it registers with its single-use token;
// the manager pins that fingerprint instead of verifying a chain. As with
// an SSH host key, the pin is the trust: the certificate's validity dates
// and names are not checked, and it is never renewed (a new key is a new
// worker, which needs a new token).

// SelfSignedValidity is the lifetime written into a self-signed worker
// certificate. Pinning ignores it; it is long so that tools that look at
// it do not flag the certificate.
const SelfSignedValidity = 20 * 365 * 24 * time.Hour

// FingerprintSize is the length of a certificate fingerprint in bytes.
const FingerprintSize = sha256.Size

// ErrPinMismatch is returned (wrapped) by the handshake of a
// PinnedClientConfig when the peer's certificate is not the pinned one.
var ErrPinMismatch = errors.New("pki: the peer's certificate is not the one pinned at registration")

// SelfSigned is a self-signed certificate and its key, in one PEM file.
type SelfSigned struct {
	// Path is the file holding the certificate, then the key (mode 0600):
	// give it as both the certificate and the key file of a Reloader.
	Path string
	Cert *x509.Certificate
	// Fingerprint is the SHA-256 of Cert's DER (FingerprintSize bytes).
	Fingerprint []byte
	// Created is true when this call made the key (the first boot).
	Created bool
}

// Fingerprint returns the SHA-256 of a DER certificate.
func Fingerprint(der []byte) []byte {
	sum := sha256.Sum256(der)
	return sum[:]
}

// FormatFingerprint returns fp as colon-free lowercase hex, for logs.
func FormatFingerprint(fp []byte) string { return hex.EncodeToString(fp) }

// LoadOrCreateSelfSigned returns the self-signed certificate in path,
// making a fresh ECDSA P-256 key and a certificate for name (its CN and
// only DNS name, e.g. "worker.norsk") if the file does not exist. The file
// is created whole or not at all, and never replaced: a temporary file in
// the same directory, synced, is hard-linked to path (which fails if path
// appeared meanwhile: then that file is loaded) and the directory synced,
// mode 0600. So a kill at any instant leaves no file or a complete one,
// and two processes starting at once load the same key. Temporary files
// older than a minute, left by such a kill, are removed. An existing file
// that cannot be parsed, or whose key does not match its certificate, is
// an error naming it and is never overwritten: the pin of a registered
// worker is its certificate. The directory must exist.
func LoadOrCreateSelfSigned(path, name string, now func() time.Time) (*SelfSigned, error) {
	removeStaleTemps(path, nowOf(now))
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parseSelfSigned(path, data)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("pki: self-signed certificate: %w", err)
	}
	data, err = newSelfSigned(name, nowOf(now))
	if err != nil {
		return nil, err
	}
	switch err := createWhole(path, data, KeyFileMode); {
	case errors.Is(err, fs.ErrExist):
		return LoadOrCreateSelfSigned(path, name, now) // made by another process meanwhile
	case err != nil:
		return nil, fmt.Errorf("pki: write self-signed certificate %s: %w", path, err)
	}
	s, err := parseSelfSigned(path, data)
	if err != nil {
		return nil, err
	}
	s.Created = true
	return s, nil
}

func parseSelfSigned(path string, data []byte) (*SelfSigned, error) {
	const fix = "remove the file to make a new key; the worker then needs a new registration token"
	if err := checkPair(data, data); err != nil {
		return nil, fmt.Errorf("self-signed certificate %s: %w (%s)", path, err, fix)
	}
	if _, err := tls.X509KeyPair(data, data); err != nil {
		return nil, fmt.Errorf("pki: self-signed certificate %s: %w (%s)", path, err, fix)
	}
	cert, err := parseCertPEM(data)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate %s: %w (%s)", path, err, fix)
	}
	return &SelfSigned{Path: path, Cert: cert, Fingerprint: Fingerprint(cert.Raw)}, nil
}

// newSelfSigned returns the PEM of a new certificate and its key.
func newSelfSigned(name string, now time.Time) ([]byte, error) {
	if name == "" {
		return nil, errors.New("pki: self-signed certificate: empty name")
	}
	key, serial, _, err := newKeySerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Norsk Manager (self-signed worker)"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(SelfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           ExtKeyUsages(RoleWorker),
		BasicConstraintsValid: true,
		DNSNames:              []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return append(encodeCert(der), keyPEM...), nil
}

// tempPattern names the temporary files of createWhole for path.
func tempPattern(path string) string { return path + ".tmp-*" }

// createWhole writes data to a synced temporary file and links it to path
// (fs.ErrExist if path exists), then syncs the directory.
func createWhole(path string, data []byte, mode fs.FileMode) (err error) {
	fh, err := os.CreateTemp(filepath.Dir(path), filepath.Base(tempPattern(path)))
	if err != nil {
		return err
	}
	tmp := fh.Name()
	defer os.Remove(tmp)
	if err := fh.Chmod(mode); err != nil {
		fh.Close()
		return err
	}
	if _, err := fh.Write(data); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeStaleTemps removes createWhole's temporary files for path that are
// older than a minute (a kill between their creation and their removal).
func removeStaleTemps(path string, now time.Time) {
	old, _ := filepath.Glob(tempPattern(path))
	for _, p := range old {
		if st, err := os.Stat(p); err == nil && now.Sub(st.ModTime()) > time.Minute {
			_ = os.Remove(p)
		}
	}
}

// PinnedClientConfig returns the tls.Config of a client that accepts only
// a server presenting the certificate whose SHA-256 is pin (a
// self-signed worker's, pinned at its registration), instead of
// verifying a chain and a name; the handshake still proves the server
// holds that certificate's key. clientCert, if not nil, is presented when
// the server asks for a client certificate (nil: none). A mismatch fails
// the handshake with an error wrapping ErrPinMismatch that names both
// fingerprints.
func PinnedClientConfig(pin []byte, clientCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) *tls.Config {
	pin = append([]byte(nil), pin...)
	if clientCert == nil {
		clientCert = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is not verified: VerifyConnection checks the pin, on
		// full handshakes and resumptions alike.
		InsecureSkipVerify:   true, //nolint:gosec // pinned in VerifyConnection
		GetClientCertificate: clientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the peer presented no certificate", ErrPinMismatch)
			}
			got := Fingerprint(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(got, pin) != 1 {
				return fmt.Errorf("%w: pinned sha256 %s, presented %s (CN %q)", ErrPinMismatch,
					FormatFingerprint(pin), FormatFingerprint(got), cs.PeerCertificates[0].Subject.CommonName)
			}
			return nil
		},
	}
}

// PinnedClientConfig is PinnedClientConfig presenting the pair last loaded
// (if the server asks for a client certificate), as ClientConfig does.
func (r *Reloader) PinnedClientConfig(pin []byte) *tls.Config {
	return PinnedClientConfig(pin, r.ClientConfig().GetClientCertificate)
}
