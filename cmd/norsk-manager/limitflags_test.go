package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
)

// TestLimitFlagErrors: a bad limit flag is a usage error naming it, before
// anything is created on disk.
func TestLimitFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--max-recv-msg-size", "64KiB"}, "--max-recv-msg-size 64 KiB: must be 1.0 MiB to 1.0 GiB"},
		{[]string{"--max-recv-msg-size", "2GiB"}, "--max-recv-msg-size"},
		{[]string{"--max-send-msg-size", "1MiB"}, "--max-send-msg-size 1.0 MiB: must be 4.0 MiB"},
		{[]string{"--max-concurrent-streams", "1"}, "--max-concurrent-streams 1: must be at least 16"},
		{[]string{"--max-event-streams-per-caller", "-1"}, "--max-event-streams-per-caller -1"},
		{[]string{"--max-job-searches-per-caller", "-1"}, "--max-job-searches-per-caller -1: must be 0 (no limit) or more"},
		{[]string{"--max-job-searches", "-1"}, "--max-job-searches -1: must be 0 (no limit) or more"},
		{[]string{"--event-stream-memory", "1MiB"}, "--event-stream-memory 1.0 MiB: must be 16 MiB to 1.0 TiB"},
		{[]string{"--event-stream-memory", "lots"}, "--event-stream-memory"},
		{[]string{"--register-rate", "-2"}, "--register-rate -2"},
		{[]string{"--register-rate", "NaN"}, "--register-rate NaN"},
		{[]string{"--register-burst", "0"}, "--register-burst 0: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cmd := newCommand()
			cmd.SetArgs(append([]string{"--data-dir", dir, "--api-addr", "127.0.0.1:0", "--log-level", "error"}, tt.args...))
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.ExecuteContext(context.Background())
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v: want a usage error containing %q", err, tt.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir was created (stat: %v)", err)
			}
		})
	}
}

// TestLimitFlagsApply: the defaults are the agent's and the gateway's;
// 0 turns the per-caller and registration limits off.
func TestLimitFlagsApply(t *testing.T) {
	var lo limitOptions
	lo.addFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
	var cfg agent.Config
	if err := lo.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxRecvMsgSize != agent.DefaultMaxRecvMsgSize || cfg.MaxSendMsgSize != agent.DefaultMaxSendMsgSize ||
		cfg.MaxConcurrentStreams != agent.DefaultMaxConcurrentStreams || cfg.Limits.MaxEventStreamsPerCaller != 64 ||
		cfg.Limits.RegisterRate != 1 || cfg.Limits.RegisterBurst != 20 || cfg.Events.MaxTotalBytes != 256<<20 ||
		cfg.Limits.MaxJobSearchesPerCaller != 8 || cfg.Limits.MaxJobSearches != 64 {
		t.Fatalf("defaults: %+v", cfg)
	}
	lo.eventStreamsPerCaller, lo.registerRate, lo.searchesPerCaller, lo.searches = 0, 0, 0, 0
	if err := lo.eventStreamMemory.Set("1GiB"); err != nil {
		t.Fatal(err)
	}
	if err := lo.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Events.MaxTotalBytes != 1<<30 {
		t.Fatalf("--event-stream-memory 1GiB: MaxTotalBytes %d", cfg.Events.MaxTotalBytes)
	}
	if cfg.Limits.MaxEventStreamsPerCaller >= 0 || cfg.Limits.RegisterRate != rate.Limit(-1) ||
		cfg.Limits.MaxJobSearchesPerCaller >= 0 || cfg.Limits.MaxJobSearches >= 0 {
		t.Fatalf("0 must turn the limits off (negative in gateway.LimitsConfig): %+v", cfg.Limits)
	}
}
