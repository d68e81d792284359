package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestCtl_PoolWorkflow drives the example pool through its life against a
// real manager: create, get (text and JSON), list, update from the JSON
// that get printed, a stale update refused with exit 4, a bad file refused
// as usage (exit 2) before anything is sent, delete.
func TestCtl_PoolWorkflow(t *testing.T) {
	addr := startTestManager(t)
	example := filepath.Join("..", "..", "examples", "pools", "live.json")
	if got := mustRun(t, addr, "pool", "create", "-f", example); got != "created pool live\n" {
		t.Fatalf("pool create printed %q", got)
	}
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "pool", "create", "-f", example)
	if r.code != ctlExitExists || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second create: exit %d, stderr %q", r.code, r.stderr)
	}

	get := mustRun(t, addr, "pool", "get", "live")
	for _, want := range []string{"Pool:            live", "Version:         1", "Restart ceiling: 5 failures in 10m0s",
		"Preemption:      on", "Bronze drop:     never", "onprem", "site=osl", "unlimited", "cloud=aws", "20"} {
		if !strings.Contains(get, want) {
			t.Errorf("pool get lacks %q:\n%s", want, get)
		}
	}

	// The JSON of get is a pool file carrying the version.
	js := mustRun(t, addr, "pool", "get", "live", "-o", "json")
	p := &managerpb.Pool{}
	if err := protojson.Unmarshal([]byte(js), p); err != nil || p.GetVersion() != 1 {
		t.Fatalf("pool get -o json = %q (%v), want a pool at version 1", js, err)
	}
	p.Tiers[1].MaxNodes = 40
	file := filepath.Join(t.TempDir(), "live.json")
	b, err := protojson.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, addr, "pool", "update", "-f", file); got != "updated pool live\n" {
		t.Fatalf("pool update printed %q", got)
	}
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "pool", "update", "-f", file)
	if r.code != ctlExitPrecondition || !strings.Contains(r.stderr, "is at version 2, not 1") {
		t.Fatalf("stale update: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := mustRun(t, addr, "pool", "update", "-f", file, "--version", "2"); got != "updated pool live\n" {
		t.Fatalf("pool update --version printed %q", got)
	}

	list := mustRun(t, addr, "pool", "list")
	if !strings.Contains(list, "live") || !strings.Contains(list, "onprem>cloud") {
		t.Errorf("pool list:\n%s", list)
	}

	for _, tc := range []struct{ name, content, want string }{
		{"not json", "{", "not a protojson norsk.api.manager.Pool"},
		{"no name", `{"tiers": [{"name": "a"}]}`, "the pool has no name"},
	} {
		bad := filepath.Join(t.TempDir(), "bad.json")
		if err := os.WriteFile(bad, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		r = runCtl(t, testCtx(), "", "--manager-url", addr, "pool", "create", "-f", bad)
		if r.code != ctlExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q", tc.name, r.code, r.stderr)
		}
	}
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "pool", "create", "-f", "-")
	if r.code != ctlExitUsage {
		t.Errorf("empty stdin: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCtl(t, testCtx(), `{"name": "x", "tiers": [{"name": "a", "nodeSelector": {"zone": ""}}]}`, "--manager-url", addr, "pool", "create", "-f", "-")
	if r.code != ctlExitUsage || !strings.Contains(r.stderr, `pool.tiers[0].node_selector["zone"]`) {
		t.Errorf("invalid selector: exit %d, stderr %q", r.code, r.stderr)
	}

	if got := mustRun(t, addr, "pool", "delete", "live"); got != "deleted pool live\n" {
		t.Fatalf("pool delete printed %q", got)
	}
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "pool", "get", "live")
	if r.code != ctlExitNotFound {
		t.Fatalf("get after delete: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := mustRun(t, addr, "pool", "list"); got != "no pools\n" {
		t.Fatalf("pool list after delete printed %q", got)
	}
}
