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

	"github.com/norsk-oss/norsk-manager/worker"
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

// TestResolve_FilesOutsideTheVersion: env_file and configs files are the
// template's own: one that is outside the version's directory (by ../, an
// absolute path, a symlink, or a path a parameter chose), not a regular
// file, or too large, fails the job with ErrInvalidJob naming the key and
// why — before its content is read. Before, the worker (often root) read
// any host file into the containers' environment or record (a job's
// parameter could pick /etc/shadow) and hung on a FIFO.
func TestResolve_FilesOutsideTheVersion(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.env")
	write(t, outside, "SECRET=host\n")
	cases := []struct {
		name, compose, want string
		extra               func(t *testing.T, vdir string)
	}{
		{"env_file ../", "services:\n  a:\n    image: x\n    env_file: [../../../secret.env]\n",
			"services.a.env_file[0]: ", climbOut},
		{"env_file absolute", "services:\n  a:\n    image: x\n    env_file: [" + outside + "]\n",
			"services.a.env_file[0]", nil},
		{"env_file from a parameter", "services:\n  a:\n    image: x\n    env_file: [\"${F}\"]\n",
			"services.a.env_file[0]", nil},
		{"env_file symlink out", "services:\n  a:\n    image: x\n    env_file: [link.env]\n",
			"services.a.env_file[0]", func(t *testing.T, vdir string) { symlink(t, outside, filepath.Join(vdir, "link.env")) }},
		{"env_file fifo", "services:\n  a:\n    image: x\n    env_file: [p.env]\n",
			"not a regular file", func(t *testing.T, vdir string) {
				if err := syscall.Mkfifo(filepath.Join(vdir, "p.env"), 0o600); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			}},
		{"config ../", "services:\n  a:\n    image: x\n    configs: [c]\nconfigs:\n  c:\n    file: ../../../secret.env\n",
			"configs.c.file: ", climbOut},
		{"config symlink out", "services:\n  a:\n    image: x\n    configs: [c]\nconfigs:\n  c:\n    file: ./c.txt\n",
			"configs.c.file", func(t *testing.T, vdir string) { symlink(t, outside, filepath.Join(vdir, "c.txt")) }},
		{"config too large", "services:\n  a:\n    image: x\n    configs: [c]\nconfigs:\n  c:\n    file: ./c.txt\n",
			"larger than", func(t *testing.T, vdir string) {
				write(t, filepath.Join(vdir, "c.txt"), strings.Repeat("x", MaxFileSize+1))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vdir := writeVersion(t, filepath.Join(dir, "cat"), "t", "1", map[string]string{ComposeFile: tc.compose})
			if tc.extra != nil {
				tc.extra(t, vdir)
			}
			c := mustLoad(t, filepath.Join(dir, "cat"))
			if len(c.Offers()) != 1 {
				t.Fatalf("refused at load: %v", c.Refused())
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.Resolve(context.Background(), job("t", "1", map[string]string{"F": outside}))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Resolve did not return (reading a FIFO?)")
			}
			if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) ||
				(tc.want != "not a regular file" && tc.want != "larger than" && !strings.Contains(err.Error(), "outside the template's directory")) {
				t.Fatalf("Resolve: %v; want ErrInvalidJob naming %q", err, tc.want)
			}
		})
	}
}

// TestResolve_FilesInsideTheVersion: files in the version's directory, also
// through a symlink that stays inside it, still load.
func TestResolve_FilesInsideTheVersion(t *testing.T) {
	dir := t.TempDir()
	vdir := writeVersion(t, dir, "t", "1", map[string]string{
		ComposeFile: "services:\n  a:\n    image: x\n    env_file: [link.env]\n    configs: [c]\nconfigs:\n  c:\n    file: ./sub/c.txt\n",
		"real.env":  "FROM_FILE=yes\n",
		"sub/c.txt": "config\n",
	})
	symlink(t, "real.env", filepath.Join(vdir, "link.env"))
	st, err := mustLoad(t, dir).Resolve(context.Background(), job("t", "1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Join(st.Services[0].Environment, " "); !strings.Contains(env, "FROM_FILE=yes") {
		t.Fatalf("environment %q lacks the env_file's FROM_FILE=yes", env)
	}
	if got := st.Services[0].Configs; len(got) != 1 || got[0].Source != filepath.Join(vdir, "sub", "c.txt") {
		t.Fatalf("configs %+v", got)
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

// climbOut writes the file ../../../secret.env of a version's directory
// (beside the catalogue).
func climbOut(t *testing.T, vdir string) {
	write(t, filepath.Join(vdir, "..", "..", "..", "secret.env"), "SECRET=host\n")
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
