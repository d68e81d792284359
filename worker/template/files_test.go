package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const oneService = "services:\n  a:\n    image: x\n"

// TestLoadCatalogue_FilesNotRegularOrTooLarge: a template file that is a
// device, a FIFO or larger than MaxFileSize is refused naming the file and
// why. Before, a .env linked to /dev/zero (or a FIFO) made LoadCatalogue
// read forever at worker start, whatever the context said.
func TestLoadCatalogue_FilesNotRegularOrTooLarge(t *testing.T) {
	cases := []struct {
		name, file, want string
		make             func(t *testing.T, path string)
	}{
		{"env is /dev/zero", EnvFile, "not a regular file", func(t *testing.T, p string) { symlink(t, "/dev/zero", p) }},
		{"compose is /dev/zero", ComposeFile, "not a regular file", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			symlink(t, "/dev/zero", p)
		}},
		{"template.json is a fifo", MetadataFile, "not a regular file", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}},
		{"env too large", EnvFile, "larger than", func(t *testing.T, p string) {
			write(t, p, "A="+strings.Repeat("x", MaxFileSize)+"\n")
		}},
		{"compose too large", ComposeFile, "larger than", func(t *testing.T, p string) {
			write(t, p, oneService+"x-pad: "+strings.Repeat("x", MaxFileSize)+"\n")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vdir := writeVersion(t, dir, "t", "1", map[string]string{ComposeFile: oneService})
			tc.make(t, filepath.Join(vdir, tc.file))
			loaded := make(chan *Catalogue, 1)
			go func() { loaded <- mustLoadOrNil(t, dir) }()
			var c *Catalogue
			select {
			case c = <-loaded:
			case <-time.After(time.Minute):
				t.Fatal("LoadCatalogue did not return (reading a device or FIFO?)")
			}
			if c == nil {
				t.FailNow()
			}
			refused := c.Refused()
			if len(refused) != 1 || len(c.Offers()) != 0 {
				t.Fatalf("refused %v, offers %v; want the version refused", refused, c.Offers())
			}
			r := refused[0]
			if !errors.Is(r, ErrBadTemplate) || r.File != filepath.Join(vdir, tc.file) || !strings.Contains(r.Error(), tc.want) {
				t.Fatalf("refusal %q (file %s); want ErrBadTemplate naming %s and %q", r, r.File, tc.file, tc.want)
			}
		})
	}
}

// mustLoadOrNil is mustLoad for another goroutine: it reports an error
// and returns nil instead of calling t.Fatal.
func mustLoadOrNil(t *testing.T, dir string) *Catalogue {
	c, err := LoadCatalogue(context.Background(), dir, quietLogger())
	if err != nil {
		t.Error(err)
		return nil
	}
	return c
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
