package ops

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// auditListed runs "norsk-ctl audit list --limit 0 -o json" and returns
// "kind who" of every entry.
func auditListed(t *testing.T, addr string) []string {
	t.Helper()
	out := mustRun(t, "audit-list", "norsk-ctl", "--manager-url", addr, "audit", "list", "--limit", "0", "-o", "json")
	var resp struct {
		Entries []struct{ Kind, Who string }
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &resp); err != nil {
		t.Fatalf("audit list -o json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range resp.Entries {
		got = append(got, e.Kind+" "+e.Who)
	}
	return got
}

// TestAudit_RealLog: a real manager audits the accepted API calls (not the
// refused one); norsk-ctl audit verify passes on its log; the log survives
// a SIGKILL and chains on after the restart; norsk-manager verify passes
// on a copy of the stopped data dir, and after one byte of a stored entry
// of the copy is changed it names that entry (exit 1), as does norsk-ctl
// audit verify against a manager serving the copy.
func TestAudit_RealLog(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	dir := filepath.Join(t.TempDir(), "data")
	addr := testproc.Addr(testproc.FreePort(t))
	m := startSingle(t, "manager", dir, addr)
	cl := managerClient(t, addr)
	ctx := context.Background()

	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: "audited"}, Services: []*commonpb.Service{{Name: "s", Command: "true"}}}
	if _, err := cl.CreateJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateJob(ctx, job); err == nil {
		t.Fatal("a second CreateJob of the same id was accepted")
	}
	mustRun(t, "slot", "norsk-ctl", "--manager-url", addr, "slot", "register", "rack1")
	mustRun(t, "append", "norsk-ctl", "--manager-url", addr, "audit", "append", "--source", "runbook", "--kind", "origin.switch", "--payload", `{"to":"b"}`)
	if err := cl.DeleteJob(ctx, "audited"); err != nil {
		t.Fatal(err)
	}
	want := []string{"job.create anonymous", "slot.register anonymous", "origin.switch anonymous", "job.delete anonymous"}
	if got := auditListed(t, addr); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("audit entries %q, want %q", got, want)
	}
	if out := mustRun(t, "verify", "norsk-ctl", "--manager-url", addr, "audit", "verify"); !strings.Contains(out, "audit log verified: 4 entries, seq 1-4") {
		t.Fatalf("audit verify:\n%s", out)
	}

	// SIGKILL: every acknowledged entry is durable, and the chain goes on.
	m.Kill()
	m = startSingle(t, "manager-2", dir, addr)
	mustRun(t, "append-2", "norsk-ctl", "--manager-url", addr, "audit", "append", "--source", "runbook", "--kind", "after.restart")
	if out := mustRun(t, "verify-2", "norsk-ctl", "--manager-url", addr, "audit", "verify"); !strings.Contains(out, "audit log verified: 5 entries, seq 1-5") {
		t.Fatalf("audit verify after the restart:\n%s", out)
	}
	m.Stop()

	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("copy the data dir: %v\n%s", err, out)
	}
	if out := mustRun(t, "offline-verify", "norsk-manager", "verify", "--data-dir", copyDir); !strings.Contains(out, "audit log 1-5 (5 entries), hash chain recomputed") {
		t.Fatalf("norsk-manager verify on the copy:\n%s", out)
	}
	if err := persistence.TamperAuditEntry(copyDir, 3); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "offline-verify-tampered", "norsk-manager", "verify", "--data-dir", copyDir)
	if code != 1 || !strings.Contains(out, "audit entry 3: its content does not match its hash") {
		t.Fatalf("norsk-manager verify on the tampered copy: exit %d\n%s", code, out)
	}
	// The original is untouched.
	mustRun(t, "offline-verify-original", "norsk-manager", "verify", "--data-dir", dir)

	// A manager serving the tampered copy: the client-side check names
	// the entry too.
	addr2 := testproc.Addr(testproc.FreePort(t))
	startSingle(t, "manager-tampered", copyDir, addr2)
	out, code = run(t, "verify-tampered", "norsk-ctl", "--manager-url", addr2, "audit", "verify")
	if code != 1 || !strings.Contains(out, "audit log does NOT verify: audit entry 3: its content does not match its hash") {
		t.Fatalf("norsk-ctl audit verify on the tampered copy: exit %d\n%s", code, out)
	}
}
