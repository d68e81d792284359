package testproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A worker running as root runs process jobs as an unprivileged job user
// (norsk-ctl --job-user, default norsk-job or nobody), in working
// directories under --job-dir (default: next to --state-dir). t.TempDir
// makes the test's temporary root 0700, which the job user cannot
// search: these helpers open what the jobs of a test must reach.

// OpenTempDirs makes path and every directory above it, up to the system
// temporary directory, searchable by everyone (0755), so that the job user
// of a worker whose --state-dir is path (or is in it) reaches the
// --job-dir next to it. Each later t.TempDir of the test is then
// reachable too (its directories are made 0755 under the usual umask):
// they share the test's temporary root. Paths outside the temporary
// directory are left alone.
func OpenTempDirs(t testing.TB, path string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(path); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// JobFilesDir returns a fresh directory the services of process jobs may
// write to, whatever user they run as (mode 1777, like /tmp), for the
// files a test's jobs leave for it (pid files, stamps), and opens the
// test's temporary root (OpenTempDirs).
func JobFilesDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	OpenTempDirs(t, dir)
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}
