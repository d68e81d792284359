package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadVersion feeds a compose.yaml and a .env to the loading of one
// template version, as an author's files reach the worker at start. It
// must never panic (the worker would not start); a version is either
// offered or refused with a *RefusalError wrapping ErrKeyNotAllowed (with
// a key path) or ErrBadTemplate; an offered one has its keys inside the
// allow-list.
func FuzzLoadVersion(f *testing.F) {
	f.Add([]byte(allowedCompose), []byte("A=1\n"))
	f.Add([]byte(fullCompose), []byte("IMAGE=x\n"))
	f.Add([]byte("services:\n  web:\n    image: x\n    privileged: true\n"), []byte(""))
	f.Add([]byte("x-a: &a\n  image: x\nservices:\n  web: *a\n---\nservices: {}\n"), []byte("B=${A:-1}\n"))
	f.Add([]byte("services:\n  web:\n    image: x\n    ports: [\"${P}:80\"]\n"), []byte("P='1\n"))
	f.Fuzz(func(t *testing.T, compose, dotEnv []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ComposeFile), compose, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, EnvFile), dotEnv, 0o644); err != nil {
			t.Fatal(err)
		}
		tv, r := loadVersion(context.Background(), "t", "1", dir)
		switch {
		case r != nil && errors.Is(r, ErrKeyNotAllowed):
			if r.KeyPath == "" {
				t.Fatalf("key refusal without a key path: %v", r)
			}
		case r != nil && !errors.Is(r, ErrBadTemplate):
			t.Fatalf("refusal %v wraps neither sentinel", r)
		case r == nil:
			if path, reason, err := checkComposeKeys(tv.compose); err != nil || path != "" {
				t.Fatalf("offered, yet %s: %s (%v)", path, reason, err)
			}
		}
	})
}
