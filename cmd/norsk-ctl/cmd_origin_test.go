package main

import (
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
)

// TestCtl_LocalErrorsAreNotTheManagers: a manager that cannot be reached is
// reported with the cause per manager (its connection error, or
// NOT_SERVING for one up without a Raft leader), never as "manager said".
func TestCtl_LocalErrorsAreNotTheManagers(t *testing.T) {
	down1, down2 := clienttest.UnusedAddr(t), clienttest.UnusedAddr(t)
	srv := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	srv.SetServing(false) // up, without a Raft leader
	notServing := srv.Addr
	cases := []struct {
		name string
		url  string
		want []string
	}{
		{"one manager down", down1, []string{"manager unavailable at " + down1 + " (no manager serves: " + down1 + " unreachable: connect: connection refused)"}},
		{"two managers down", down1 + "," + down2, []string{"manager unavailable at " + down1 + "," + down2,
			"no manager serves: " + down1 + " unreachable: connect: connection refused, " + down2 + " unreachable: connect: connection refused"}},
		{"one NOT_SERVING, one down", notServing + "," + down1, []string{"manager unavailable at " + notServing + "," + down1,
			"(no manager serves: " + notServing + " NOT_SERVING (no Raft leader), " + down1 + " unreachable: connect: connection refused)\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCtl(t, testCtx(), "", "--manager-url", tc.url, "--timeout", "5s", "node", "list")
			if r.code != ctlExitUnavailable {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if strings.Contains(r.stderr, "manager said") {
				t.Errorf("a connection failure quoted as the manager's: %q", r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
		})
	}
}

// TestCtl_VersionNamesTheManagerThatAnswered: with several --manager-url
// addresses, "version" prints the one that answered, not the list.
func TestCtl_VersionNamesTheManagerThatAnswered(t *testing.T) {
	_, addr := newTestFake(t)
	down := clienttest.UnusedAddr(t)
	r := runCtl(t, testCtx(), "", "--manager-url", down+","+addr, "version")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "at "+addr+"\n") || strings.Contains(r.stdout, down) {
		t.Fatalf("version output %q does not name %s alone", r.stdout, addr)
	}
}
