package template

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// writeVersion writes files (name → content) into dir/name/version and
// returns the version's directory.
func writeVersion(t testing.TB, dir, name, version string, files map[string]string) string {
	t.Helper()
	vdir := filepath.Join(dir, name, version)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(vdir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return vdir
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mustLoad(t testing.TB, dir string) *Catalogue {
	t.Helper()
	c, err := LoadCatalogue(context.Background(), dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
