package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_Pools_SurviveManagerKill drives a pool through norsk-ctl against
// a manager process that is SIGKILLed after every acknowledged step: the
// created pool, its update, the refusal of a stale version and the delete
// all hold across the kills.
func TestE2E_Pools_SurviveManagerKill(t *testing.T) {
	dir := t.TempDir()
	port := testproc.FreePort(t)
	m := startManager(t, filepath.Join(dir, "data"), port)
	restart := func() {
		t.Helper()
		m.Kill()
		m = startManager(t, m.dataDir, port)
	}
	run := func(want int, args ...string) string {
		t.Helper()
		out, code := ctl(t, m.addr, args...)
		if code != want {
			t.Fatalf("norsk-ctl %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	getPool := func() *managerpb.Pool {
		t.Helper()
		p := &managerpb.Pool{}
		if err := protojson.Unmarshal([]byte(run(0, "pool", "get", "live", "-o", "json")), p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	example, err := filepath.Abs(filepath.Join("..", "..", "examples", "pools", "live.json"))
	if err != nil {
		t.Fatal(err)
	}
	run(0, "pool", "create", "-f", example)
	restart()
	v1 := getPool()
	if v1.GetVersion() != 1 || len(v1.GetTiers()) != 2 {
		t.Fatalf("after the kill: %v, want the example at version 1", v1)
	}
	run(5, "pool", "create", "-f", example) // AlreadyExists

	v1.Tiers[1].MaxNodes = 40
	file := filepath.Join(dir, "live.json")
	b, err := protojson.Marshal(v1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run(0, "pool", "update", "-f", file)
	restart()
	if out := run(4, "pool", "update", "-f", file); !strings.Contains(out, "is at version 2, not 1") { // stale
		t.Fatalf("stale update after the kill:\n%s", out)
	}
	if v2 := getPool(); v2.GetVersion() != 2 || v2.GetTiers()[1].GetMaxNodes() != 40 {
		t.Fatalf("after the kill: %v, want version 2 with max nodes 40", v2)
	}

	run(0, "pool", "delete", "live")
	restart()
	run(3, "pool", "get", "live") // NotFound
	if out := run(0, "pool", "list"); out != "no pools\n" {
		t.Fatalf("pool list after the delete and a kill: %q", out)
	}
}
