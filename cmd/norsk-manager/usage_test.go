package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenAddrFlagErrors: a malformed --api-addr or --metrics-addr is a
// usage error (exit code 2) naming the flag, like the other bad flags, and
// nothing is created on disk (issue 10 §6: it was a run-time failure).
func TestListenAddrFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"api addr without port", []string{"--api-addr", "nonsense"}, `--api-addr "nonsense": want host:port`},
		{"api addr with a non-numeric port", []string{"--api-addr", ":abc"}, `--api-addr ":abc"`},
		{"api addr an IP without port", []string{"--api-addr", "1.2.3.4"}, `--api-addr "1.2.3.4"`},
		{"api addr port out of range", []string{"--api-addr", "127.0.0.1:65536"}, "--api-addr"},
		{"api addr empty", []string{"--api-addr", ""}, "--api-addr"},
		{"api addr in dev mode", []string{"--dev", "--api-addr", "nonsense"}, "--api-addr"},
		{"metrics addr without port", []string{"--api-addr", "127.0.0.1:0", "--metrics-addr", "localhost"}, "--metrics-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cmd := newCommand()
			cmd.SetArgs(append([]string{"--data-dir", dir, "--log-level", "error"}, tt.args...))
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.ExecuteContext(context.Background())
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v (%T): want a usage error (exit code 2)", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir was created before the flags were validated (stat: %v)", err)
			}
		})
	}
}

// TestCheckListenAddr_Accepts: host:port forms that bind.
func TestCheckListenAddr_Accepts(t *testing.T) {
	for _, a := range []string{"127.0.0.1:6790", "0.0.0.0:6790", ":6790", "localhost:0", "[::1]:6790", "[::]:0"} {
		if err := checkListenAddr("--api-addr", a, ""); err != nil {
			t.Errorf("checkListenAddr(%q): %v", a, err)
		}
	}
}

// TestHelpListsExitCodes: --help documents every exit code main uses.
func TestHelpListsExitCodes(t *testing.T) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetArgs([]string{"--help"})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Exit codes:", "\n  0  stopped by SIGINT or SIGTERM", "\n  1  failed at run time", "\n  2  bad flag or argument"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not contain %q:\n%s", want, out.String())
		}
	}
}
