package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of a TLS connection to managers, as
// norsk-ctl's --ca-cert, --client-cert, --client-key and --tls-server-name
// (NORSK_CACERT, NORSK_CLIENT_CERT, NORSK_CLIENT_KEY, NORSK_TLS_SERVER_NAME).
type TLSFiles struct {
	// CACert is the CA bundle that signed the managers' certificates.
	// Empty: the system's roots.
	CACert string
	// ClientCert and ClientKey are this client's certificate and key, for
	// a manager that requires client certificates (--tls-ca). Both or
	// neither.
	ClientCert, ClientKey string
	// ServerName is the name every manager's certificate must carry
	// (e.g. server.norsk). Empty: the host of each address dialled.
	ServerName string
}

// Config reads the files into a tls.Config for Settings.TLS (TLS 1.2 or
// later). Errors name the file and why it cannot be used.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CACert != "" {
		pem, err := os.ReadFile(f.CACert)
		if err != nil {
			return nil, fmt.Errorf("client: CA certificate: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: CA certificate %s: no PEM certificate in it", f.CACert)
		}
	}
	switch {
	case f.ClientCert == "" && f.ClientKey == "":
	case f.ClientCert == "" || f.ClientKey == "":
		return nil, errors.New("client: a client certificate needs its key and a key its certificate: give both")
	default:
		pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate %s with key %s: %w", f.ClientCert, f.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
