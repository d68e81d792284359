package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// nopRuntime satisfies worker.Runtime for configuration tests.
type nopRuntime struct{ worker.Runtime }

func TestConfig_Validate(t *testing.T) {
	base := func() worker.Config {
		c := worker.DefaultConfig()
		c.StateDir = "/tmp/x"
		c.Runtime = nopRuntime{}
		return c
	}
	cases := []struct {
		name    string
		mutate  func(*worker.Config)
		wantErr string // "" for valid
	}{
		{"defaults (mock pool)", func(*worker.Config) {}, ""},
		{"token and manager", func(c *worker.Config) { c.Token, c.ManagerURLs = "t", []string{"127.0.0.1:6790", "grpc://m2:6790"} }, ""},
		{"no runtime", func(c *worker.Config) { c.Runtime = nil }, "Runtime is required"},
		{"no state dir", func(c *worker.Config) { c.StateDir = "" }, "StateDir is required"},
		{"bad listen", func(c *worker.Config) { c.Listen = "nonsense" }, "Listen"},
		{"bad listen port", func(c *worker.Config) { c.Listen = "127.0.0.1:99999" }, "port"},
		{"token without managers", func(c *worker.Config) { c.Token = "t" }, "ManagerURLs is empty"},
		{"managers without token (restart on the stored identity)", func(c *worker.Config) { c.ManagerURLs = []string{"m:1"} }, ""},
		{"restart on the stored identity, wildcard listen needs advertise", func(c *worker.Config) {
			c.ManagerURLs, c.Listen = []string{"m:1"}, "0.0.0.0:7001"
		}, "set Advertise"},
		{"negative offline info bound", func(c *worker.Config) { c.OfflineInfoBytes = -1 }, "OfflineInfoBytes"},
		{"https manager", func(c *worker.Config) { c.Token, c.ManagerURLs = "t", []string{"https://m:1"} }, "TLS"},
		{"manager without port", func(c *worker.Config) { c.Token, c.ManagerURLs = "t", []string{"m"} }, "ManagerURLs[0]"},
		{"wildcard listen needs advertise", func(c *worker.Config) {
			c.Token, c.ManagerURLs, c.Listen = "t", []string{"m:1"}, "0.0.0.0:7001"
		}, "set Advertise"},
		{"wildcard listen with advertise", func(c *worker.Config) {
			c.Token, c.ManagerURLs, c.Listen, c.Advertise = "t", []string{"m:1"}, "0.0.0.0:7001", "10.0.0.5"
		}, ""},
		{"advertise host:port", func(c *worker.Config) { c.Advertise = "worker.example:7100" }, ""},
		{"bad advertise", func(c *worker.Config) { c.Advertise = "a b" }, "Advertise"},
		{"zero health interval", func(c *worker.Config) { c.HealthInterval = 0 }, "HealthInterval"},
		{"negative stop grace", func(c *worker.Config) { c.StopGrace = -time.Second }, "StopGrace"},
		{"max backoff below backoff", func(c *worker.Config) { c.MaxRetryBackoff = time.Millisecond }, "MaxRetryBackoff"},
		{"no pending events", func(c *worker.Config) { c.PendingEventLimit = 0 }, "PendingEventLimit"},
		{"no resources (reports none)", func(c *worker.Config) { c.Resources = nil }, ""},
		{"zero capacity", func(c *worker.Config) { c.Resources = &commonpb.NodeResources{} }, "Resources.capacity"},
		{"bad zone", func(c *worker.Config) { c.Resources = &commonpb.NodeResources{Capacity: 1, Zone: "a b"} }, "Resources.zone"},
	}
	if got := worker.DefaultConfig().Resources.GetCapacity(); got <= 0 {
		t.Fatalf("DefaultConfig capacity = %v, want the cores rule (> 0)", got)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestProofs(t *testing.T) {
	// Known-answer values pin the handshake's byte layout (proto/worker.proto).
	w := worker.WorkerProof("cred", "node-1", "abc")
	m := worker.ManagerProof("cred", "node-1", "abc")
	// Computed independently: python3 hmac.new(b"cred", b"norsk-worker-proof|node-1|abc", sha256).
	if want := "444a6698ea32e2cff22e98dab7db21488c05dd4a69ed230a000b1e3da225ecf4"; w != want {
		t.Errorf("WorkerProof = %s, want %s", w, want)
	}
	if want := "52b221f2f3017d6ff590550404a0c42558a6874a827b2fb48cfb2fd4cc3a21fa"; m != want {
		t.Errorf("ManagerProof = %s, want %s", m, want)
	}
	if !worker.ProofEqual(w, worker.WorkerProof("cred", "node-1", "abc")) || worker.ProofEqual(w, worker.WorkerProof("cred2", "node-1", "abc")) {
		t.Error("ProofEqual")
	}
}
