package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestAgent_Restart_WithoutToken: a worker restarted on its state
// directory with manager URLs but no token comes back as the same node: it
// serves sessions with the stored identity and registers with the
// credential alone. The stored identity still matches the original token.
func TestAgent_Restart_WithoutToken(t *testing.T) {
	m := newFakeManager(t, "node-4", "cred-4")
	dir := t.TempDir()
	rt := newRuntime(t, filepath.Join(dir, "process"))
	withToken := func(c *worker.Config) { c.Token, c.ManagerURLs, c.StateDir = "tok-4", []string{m.addr}, dir }
	withoutToken := func(c *worker.Config) { c.ManagerURLs, c.StateDir = []string{m.addr}, dir }

	runUntilRegistered := func(mutate func(*worker.Config), n int) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := newAgent(t, rt, mutate)
		done := runAgent(ctx, a)
		<-a.Ready()
		open(t, a.Addr().String(), "node-4", "cred-4", uint64(n)) // the credential proves itself
		m.waitRequests(t, n)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	runUntilRegistered(withToken, 1)
	runUntilRegistered(withoutToken, 2)
	if req := m.waitRequests(t, 2)[1]; req.GetToken() != "" || req.GetNodeCredential() != "cred-4" {
		t.Errorf("tokenless registration sent token %q, credential %q; want none and cred-4", req.GetToken(), req.GetNodeCredential())
	}
	runUntilRegistered(withToken, 3) // the original token still finds the identity
	if got := m.waitRequests(t, 3)[2].GetNodeCredential(); got != "cred-4" {
		t.Errorf("restart with the original token presented %q, want cred-4", got)
	}
}

// TestAgent_Restart_WithoutToken_NoIdentity: without a token and without a
// stored identity there is nothing to register with: Run says so, naming
// the file, and registers nothing.
func TestAgent_Restart_WithoutToken_NoIdentity(t *testing.T) {
	m := newFakeManager(t, "node-5", "cred-5")
	dir := t.TempDir()
	a := newAgent(t, newRuntime(t, filepath.Join(dir, "process")), func(c *worker.Config) { c.ManagerURLs, c.StateDir = []string{m.addr}, dir })
	err := <-runAgent(context.Background(), a)
	if !errors.Is(err, worker.ErrNoStoredIdentity) || !strings.Contains(err.Error(), filepath.Join(dir, "identity.json")) ||
		!strings.Contains(err.Error(), "--token") {
		t.Fatalf("Run = %v, want ErrNoStoredIdentity naming the file and --token", err)
	}
}

// TestAgent_CorruptIdentity_AdviceWorks: a corrupt identity.json stops the
// worker with an error naming the file and saying what to do; doing it
// (moving the file aside and starting with a new slot's token) works.
func TestAgent_CorruptIdentity_AdviceWorks(t *testing.T) {
	m := newFakeManager(t, "node-new", "cred-new")
	dir := t.TempDir()
	path := filepath.Join(dir, "identity.json")
	if err := os.WriteFile(path, []byte(`{"node_id": "node-old", "cred`), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, filepath.Join(dir, "process"))
	for _, token := range []string{"", "tok-old", "tok-new"} {
		a := newAgent(t, rt, func(c *worker.Config) { c.Token, c.ManagerURLs, c.StateDir = token, []string{m.addr}, dir })
		err := <-runAgent(context.Background(), a)
		if !errors.Is(err, worker.ErrBadStoredIdentity) {
			t.Fatalf("token %q: Run = %v, want ErrBadStoredIdentity", token, err)
		}
		for _, want := range []string{path, "move it aside", "--token of a new cluster slot", "norsk-ctl slot register"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("token %q: %q lacks %q", token, err, want)
			}
		}
	}
	if err := os.Rename(path, path+".broken"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newAgent(t, rt, func(c *worker.Config) { c.Token, c.ManagerURLs, c.StateDir = "tok-new", []string{m.addr}, dir })
	done := runAgent(ctx, a)
	waitUntil(t, "registered", func() bool { id, ok := a.Identity(); return ok && id.NodeID == "node-new" })
	if req := m.waitRequests(t, 1)[0]; req.GetToken() != "tok-new" || req.GetNodeCredential() != "" {
		t.Errorf("registration with token %q, credential %q", req.GetToken(), req.GetNodeCredential())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("no new identity.json: %v", err)
	}
}

// TestAgent_MockPool_RefusesStoredIdentity: a worker with neither a token
// nor manager URLs (a mock-pool worker) over a state directory that holds a
// node identity — a copy of a slot worker's — refuses to run, naming the
// file and the node, before it restores (re-adopts) any of the node's jobs
// or listens; a corrupt identity is refused too.
func TestAgent_MockPool_RefusesStoredIdentity(t *testing.T) {
	cases := []struct {
		name    string
		content string
		want    error
		mention []string
	}{
		{"identity", `{"node_id":"node-x","credential":"cred-x","node_name":"x"}`, worker.ErrIdentityWithoutManager,
			[]string{"identity.json", "node node-x", "--manager-url or $NORSK_MANAGER_URL"}},
		{"corrupt identity", `{"node_id":`, worker.ErrBadStoredIdentity, []string{"identity.json", "move it aside"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			rt := &restoreSpy{Runtime: newRuntime(t, filepath.Join(dir, "process"))}
			a := newAgent(t, rt, func(c *worker.Config) { c.StateDir = dir })
			err := <-runAgent(context.Background(), a)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			for _, want := range tc.mention {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
			if rt.restored.Load() {
				t.Error("the runtime restored the node's jobs")
			}
			if a.Addr() != nil {
				t.Error("the worker listened")
			}
		})
	}
}

// restoreSpy records whether Restore was called.
type restoreSpy struct {
	worker.Runtime
	restored atomic.Bool
}

func (r *restoreSpy) Restore(ctx context.Context) error {
	r.restored.Store(true)
	return r.Runtime.Restore(ctx)
}
