package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterFlagErrors: a bad cluster flag is a usage error (exit code
// 2) whose message names the flag, and nothing is created on disk.
func TestClusterFlagErrors(t *testing.T) {
	base := []string{"--name", "m1", "--gossip-addr", "127.0.0.1:17946", "--cluster-addr", "127.0.0.1:17947",
		"--raft-addr", "127.0.0.1:17948", "--api-addr", "127.0.0.1:0", "--log-level", "error"}
	tests := []struct {
		name string
		args []string
		want string // in the message
	}{
		{"join without port", []string{"--join", "127.0.0.1"}, "--join"},
		{"join with empty host", []string{"--join", ":7946"}, "--join"},
		{"join with bad port", []string{"--join", "127.0.0.1:99999"}, "--join"},
		{"advertise with port", []string{"--join", "127.0.0.1:7946", "--advertise", "127.0.0.1:7000"}, "--advertise"},
		{"advertise bad value", []string{"--join", "127.0.0.1:7946", "--advertise", "not a host!"}, "--advertise"},
		{"advertise unspecified", []string{"--join", "127.0.0.1:7946", "--advertise", "0.0.0.0"}, "--advertise"},
		{"negative dead-server-timeout", []string{"--bootstrap-expect", "3", "--dead-server-timeout", "-5s"}, "--dead-server-timeout"},
		{"zero dead-server-timeout", []string{"--bootstrap-expect", "3", "--dead-server-timeout", "0s"}, "--dead-server-timeout"},
		{"negative bootstrap-expect", []string{"--bootstrap-expect", "-1", "--join", "127.0.0.1:7946"}, "--bootstrap-expect"},
		{"gossip key not base64", []string{"--bootstrap-expect", "3", "--gossip-key", "%%%"}, "--gossip-key"},
		{"gossip key wrong length", []string{"--bootstrap-expect", "3", "--gossip-key", "c2hvcnQ="}, "--gossip-key"},
		{"dead-server-timeout too short", []string{"--bootstrap-expect", "3", "--dead-server-timeout", "1ms"}, "--dead-server-timeout 1ms: must be at least 1s"},
		{"bootstrap-expect too large", []string{"--bootstrap-expect", "100000"}, "--bootstrap-expect 100000: must be 1 to 9"},
		{"name with a slash", []string{"--bootstrap-expect", "3", "--name", "bad name/x"}, `--name "bad name/x": a manager's name is`},
		{"raft addr bad port", []string{"--bootstrap-expect", "3", "--raft-addr", "127.0.0.1:70000"}, "--raft-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cmd := newCommand()
			cmd.SetArgs(append(append(append([]string{}, base...), "--data-dir", dir), tt.args...))
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.ExecuteContext(context.Background())
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v (%T): want a usage error (exit code 2)", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir was created before the flags were validated (stat: %v)", err)
			}
		})
	}
}

// TestClusterFlagOnSingleManager: a cluster flag given without --join or
// --bootstrap-expect is a usage error naming it, before anything is
// created on disk.
func TestClusterFlagOnSingleManager(t *testing.T) {
	for _, args := range [][]string{
		{"--name", "m1"},
		{"--raft-addr", "127.0.0.1:17948"},
		{"--gossip-addr", "127.0.0.1:17946"},
		{"--cluster-addr", "127.0.0.1:17947"},
		{"--advertise", "127.0.0.1"},
		{"--gossip-key", "c2hvcnQ="},
		{"--dead-server-timeout", "1m"},
		{"--cluster-timings", "local"},
	} {
		t.Run(args[0], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cmd := newCommand()
			cmd.SetArgs(append([]string{"--data-dir", dir, "--api-addr", "127.0.0.1:0", "--log-level", "error"}, args...))
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.ExecuteContext(context.Background())
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), args[0]+" is a cluster flag") {
				t.Fatalf("error %v: want a usage error naming %s as a cluster flag", err, args[0])
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir was created (stat: %v)", err)
			}
		})
	}
}

// TestBootstrapExpectEvenWarns: an even --bootstrap-expect is accepted
// with a warning.
func TestBootstrapExpectEvenWarns(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		o := &options{name: "m1", gossipAddr: "127.0.0.1:1", clusterAddr: "127.0.0.1:2", raftAddr: "127.0.0.1:3",
			bootstrapExpect: n, deadServerTimeout: time.Minute, clusterTimings: "lan"}
		if _, err := o.clusterConfig(log); err != nil {
			t.Fatalf("--bootstrap-expect %d: %v", n, err)
		}
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "even")
		if warned != (n%2 == 0) {
			t.Errorf("--bootstrap-expect %d: warned=%v; log: %s", n, warned, buf.String())
		}
	}
}

// TestAdvertiseAccepted: hosts and IPs without a port are accepted.
func TestAdvertiseAccepted(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "::1", "[::1]", "manager-1.example.internal", "m1"} {
		if err := checkAdvertise(a); err != nil {
			t.Errorf("checkAdvertise(%q): %v", a, err)
		}
	}
}
