package pki

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCA creates a CA for tests (other packages' too) and writes its
// certificate to dir/ca.pem. It fails the test on any error.
func TestCA(t testing.TB, dir string) (*CA, string) {
	t.Helper()
	ca, err := CreateCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, ca.CertPEM, CertFileMode); err != nil {
		t.Fatal(err)
	}
	return ca, path
}

// TestIssue issues a certificate of opts.Role and writes it to
// dir/name.pem and dir/name-key.pem, replacing files of those names (tests
// of renewal rely on it), and returns the certificate and both paths. It
// fails the test on any error.
func TestIssue(t testing.TB, ca *CA, dir, name string, opts CertOptions) (*Issued, Files) {
	t.Helper()
	is, err := ca.Issue(opts)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	// Key first: a reader between the two writes sees a mismatched pair
	// and keeps the old one (ErrKeyMismatch), never a wrong pair.
	if err := os.WriteFile(f.Key, is.KeyPEM, KeyFileMode); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Cert, is.CertPEM, CertFileMode); err != nil {
		t.Fatal(err)
	}
	return is, f
}
