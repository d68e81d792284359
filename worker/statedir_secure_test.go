//go:build unix

package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestLockStateDir_TightensLooseStateDir: a state directory an older
// worker (or an operator) left readable by others is made private at the
// next start, its secrets included, so that no other user — a job's
// above all — can read the node credential or the TLS key.
func TestLockStateDir_TightensLooseStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{
		worker.IdentityFile:       0o644,
		worker.SelfSignedCertFile: 0o640,
		"other.json":              0o644, // not a secret: left alone
	}
	for name, mode := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("{}"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := worker.LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Release() })
	want := map[string]os.FileMode{
		dir:                                     0o700,
		filepath.Join(dir, worker.IdentityFile): 0o600,
		filepath.Join(dir, worker.SelfSignedCertFile): 0o600,
		filepath.Join(dir, "other.json"):              0o644,
	}
	for path, mode := range want {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %#o, want %#o", path, fi.Mode().Perm(), mode)
		}
	}
}

// TestSecureStateDir_RefusesAnotherOwner: a state directory or secret
// owned by another user is refused, naming the file and the owner, and
// left as it is (that user could loosen it again).
func TestSecureStateDir_RefusesAnotherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	for _, tc := range []struct {
		name  string
		chown string // path under the state dir; "" the dir itself
	}{
		{"directory", ""},
		{"identity", worker.IdentityFile},
		{"tls key", worker.SelfSignedCertFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range worker.SecretFiles() {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			target := filepath.Join(dir, tc.chown)
			if err := os.Chown(target, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			err := worker.SecureStateDir(dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Clean(target)+" is owned by uid 65534") {
				t.Fatalf("err = %v; want one naming %s and uid 65534", err, target)
			}
			if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
				t.Errorf("state directory mode changed to %#o on refusal", fi.Mode().Perm())
			}
		})
	}
}
