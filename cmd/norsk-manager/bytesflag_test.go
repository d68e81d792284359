package main

import (
	"bytes"
	"context"
	"errors"
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
	cmd.SetArgs([]string{"--data-dir", filepath.Join(t.TempDir(), "d"), "--min-free-disk", "lots"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--min-free-disk") {
		t.Fatalf("--min-free-disk lots: %v, want a usage error naming the flag", err)
	}
}
