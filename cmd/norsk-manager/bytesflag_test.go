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

func TestBytesFlag_Set(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"256MiB", 256 << 20, true},
		{"1GiB", 1 << 30, true},
		{"500MB", 500_000_000, true},
		{"4096", 4096, true},
		{"0", 0, true},
		{"68MiB", 68 << 20, true},
		{"lots", 0, false},
		{"-1MiB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var b bytesFlag
			err := b.Set(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("Set(%q) = %v, want ok %v", tt.in, err, tt.ok)
			}
			if tt.ok && uint64(b) != tt.want {
				t.Fatalf("Set(%q) = %d, want %d", tt.in, b, tt.want)
			}
		})
	}
}

// TestMinFreeDiskFlag: the default is the store's and a bad size is a
// usage error naming the flag.
func TestMinFreeDiskFlag(t *testing.T) {
	cmd := newCommand()
	if got := cmd.Flags().Lookup("min-free-disk").DefValue; got != "256 MiB" {
		t.Errorf("--min-free-disk default %q, want 256 MiB", got)
	}
	for _, tt := range []struct{ value, want string }{
		{"lots", "is not a size"},
		{"4MiB", "must be 0 (off) or at least 68 MiB"},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		cmd := newCommand()
		cmd.SetArgs([]string{"--data-dir", dir, "--api-addr", "127.0.0.1:0", "--min-free-disk", tt.value})
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.ExecuteContext(context.Background())
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--min-free-disk") || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("--min-free-disk %s: %v, want a usage error naming the flag and %q", tt.value, err, tt.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("--min-free-disk %s: the data dir was created (stat: %v)", tt.value, err)
		}
	}
}
