package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 5280 §4.2.1.2 method (1): the key identifier, not a signature
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Role is what a certificate is for; it decides its extended key usages and
// its role name (RoleName).
type Role string

const (
	// RoleServer is a manager: it serves the API (and, later, the Raft and
	// actor ports) and dials other managers and workers. Server and client
	// authentication.
	RoleServer Role = "server"
	// RoleClient is an operator's client (norsk-ctl, the Go client, the
	// published SDK) presenting a certificate to a manager that requires
	// one. Client authentication only: it cannot serve.
	RoleClient Role = "client"
	// RoleWorker is a worker agent: it serves the stream the manager dials
	// back and presents the same certificate when it registers with a
	// manager that requires client certificates. Server and client
	// authentication.
	RoleWorker Role = "worker"
)

// Roles are the roles Issue accepts, in the order --help lists them.
var Roles = []Role{RoleServer, RoleClient, RoleWorker}

// DefaultDomain is the domain of role names (RoleName) when none is given,
// as Nomad's is "nomad".
const DefaultDomain = "norsk"

// Default lifetimes, as `nomad tls`: a CA for five years, a certificate for
// one.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// clockSkew back-dates NotBefore, so that a host whose clock is a little
// behind the one that issued the certificate accepts it at once.
const clockSkew = time.Minute

// RoleName is the DNS name every certificate of role carries in its
// subject alternative names: "<role>.<domain>" (server.norsk,
// worker.norsk). A manager verifies a worker's certificate by this name
// rather than by the worker's address, which cloud instances do not know
// in advance (Nomad checks server.<region>.nomad the same way).
func RoleName(role Role, domain string) string {
	if domain == "" {
		domain = DefaultDomain
	}
	return string(role) + "." + domain
}

// ExtKeyUsages returns the extended key usages of role's certificates
// (nil for an unknown role).
func ExtKeyUsages(role Role) []x509.ExtKeyUsage {
	switch role {
	case RoleServer, RoleWorker:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case RoleClient:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return nil
}

// CAOptions configures CreateCA. The zero value is usable.
type CAOptions struct {
	// Domain goes into the CA's common name ("Norsk Manager CA norsk").
	// Default DefaultDomain.
	Domain string
	// Validity is how long the CA is valid from now. Default
	// DefaultCAValidity.
	Validity time.Duration
	// Now returns the current time; nil is time.Now.
	Now func() time.Time
}

// CA is a certificate authority: its certificate and private key, parsed
// and as PEM.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// CreateCA makes a new self-signed CA with a fresh ECDSA P-256 key. It may
// sign leaf certificates only (path length 0). Errors come from the system's
// random source.
func CreateCA(opts CAOptions) (*CA, error) {
	if opts.Domain == "" {
		opts.Domain = DefaultDomain
	}
	if opts.Validity <= 0 {
		opts.Validity = DefaultCAValidity
	}
	now := nowOf(opts.Now)
	key, serial, skid, err := newKeySerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Norsk Manager CA " + opts.Domain, Organization: []string{"Norsk Manager"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(opts.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	return newCA(der, key)
}

// ParseCA reads a CA from its PEM certificate and EC private key (the
// files CreateCA's PEM was written to). It fails with ErrBadPEM, ErrNotCA or
// ErrKeyMismatch.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, ErrNotCA
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, ErrKeyMismatch
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse created certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// CertOptions configures CA.Issue.
type CertOptions struct {
	// Role is the certificate's role. Required.
	Role Role
	// Domain is the domain of the role name put in the SANs. Default
	// DefaultDomain.
	Domain string
	// Validity is how long the certificate is valid from now; it is cut
	// to the CA's own expiry. Default DefaultCertValidity.
	Validity time.Duration
	// DNSNames and IPAddresses are added to the SANs, after the role name
	// (and, for servers and workers, localhost and 127.0.0.1 and ::1, unless
	// NoLoopback). Duplicates are dropped.
	DNSNames    []string
	IPAddresses []net.IP
	// NoLoopback leaves localhost, 127.0.0.1 and ::1 out of a server's or
	// worker's SANs.
	NoLoopback bool
	// Now returns the current time; nil is time.Now.
	Now func() time.Time
}

// Issued is a certificate the CA signed and its private key, parsed and as
// PEM.
type Issued struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a new certificate of opts.Role with a fresh ECDSA P-256 key.
// Its subject is the role name; its SANs are the role name, localhost,
// 127.0.0.1 and ::1 for servers and workers, then opts' names and
// addresses. It fails for an unknown role, a CA that has expired, or an
// empty DNS name.
func (ca *CA) Issue(opts CertOptions) (*Issued, error) {
	ekus := ExtKeyUsages(opts.Role)
	if ekus == nil {
		return nil, fmt.Errorf("pki: unknown role %q (want one of %v)", opts.Role, Roles)
	}
	if opts.Validity <= 0 {
		opts.Validity = DefaultCertValidity
	}
	now := nowOf(opts.Now)
	notAfter := now.Add(opts.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("pki: the CA expired on %s: create a new CA", ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	name := RoleName(opts.Role, opts.Domain)
	dns := []string{name}
	var ips []net.IP
	if opts.Role != RoleClient && !opts.NoLoopback {
		dns = append(dns, "localhost")
		ips = append(ips, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	}
	for _, d := range opts.DNSNames {
		if d == "" {
			return nil, errors.New("pki: empty DNS name")
		}
		if !slices.Contains(dns, d) {
			dns = append(dns, d)
		}
	}
	for _, ip := range opts.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	key, serial, skid, err := newKeySerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Norsk Manager"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           ekus,
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
		SubjectKeyId:          skid,
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse created certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

func nowOf(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}

// newKeySerial returns a new ECDSA P-256 key, a random serial number for
// its certificate (newSerial) and its subject key id (keyID).
func newKeySerial() (*ecdsa.PrivateKey, *big.Int, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pki: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	skid, err := keyID(key.Public())
	if err != nil {
		return nil, nil, nil, err
	}
	return key, serial, skid, nil
}

// newSerial returns a random 128-bit serial number (RFC 5280 allows up to
// 20 octets; CA/Browser forum asks for at least 64 random bits).
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never 0
}

// keyID is the SHA-1 of the public key's DER (RFC 5280 §4.2.1.2).
func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal public key: %w", err)
	}
	sum := sha1.Sum(der) //nolint:gosec // an identifier, see the import
	return sum[:], nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// parseCertPEM parses the first CERTIFICATE block of b.
func parseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: want a CERTIFICATE block", ErrBadPEM)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parse certificate: %w", err)
			}
			return c, nil
		}
	}
}

// parseKeyPEM parses an "EC PRIVATE KEY" (SEC 1) or a "PRIVATE KEY"
// (PKCS #8) block holding an ECDSA key.
func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: want an EC PRIVATE KEY block", ErrBadPEM)
		}
		switch blk.Type {
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parse key: %w", err)
			}
			return k, nil
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parse key: %w", err)
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("%w: the CA key must be ECDSA, not %T", ErrBadPEM, k)
			}
			return ek, nil
		}
	}
}
