package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestCtl_NodeCordonDrainUncordon: each command says what it did, node
// list shows the state in STATE and node get who, when and why; an
// unknown node exits 3 naming it.
func TestCtl_NodeCordonDrainUncordon(t *testing.T) {
	_, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "n1")
	cases := []struct {
		args  []string
		out   string
		state string
		get   string
	}{
		{[]string{"node", "cordon", "n1", "--reason", "disk swap"}, "node n1 cordoned: no new placements; its running jobs stay\n",
			"started,cordoned", "Scheduling: cordoned 0s ago by 127.0.0.1: disk swap\n"},
		{[]string{"node", "drain", "n1", "--reason", "kernel update"},
			"node n1 draining: no new placements; the placement engine moves its placed jobs elsewhere\n",
			"started,draining", "Scheduling: draining 0s ago by 127.0.0.1: kernel update\n"},
		{[]string{"node", "uncordon", "n1"}, "node n1 uncordoned: eligible for new placements\n",
			"started", "Scheduling: eligible since 0s ago by 127.0.0.1\n"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			if got := mustRun(t, addr, tc.args...); got != tc.out {
				t.Errorf("printed %q, want %q", got, tc.out)
			}
			list := mustRun(t, addr, "node", "list")
			if !regexp.MustCompile(`(?m)^n1\s+mock\s+` + regexp.QuoteMeta(tc.state) + `\s+yes\s`).MatchString(list) {
				t.Errorf("node list does not show %q:\n%s", tc.state, list)
			}
			if get := mustRun(t, addr, "node", "get", "n1"); !strings.Contains(get, tc.get) {
				t.Errorf("node get lacks %q:\n%s", tc.get, get)
			}
		})
	}
	if got := mustRun(t, addr, "-o", "json", "node", "cordon", "n1"); strings.TrimSpace(got) != "{}" {
		t.Errorf("-o json printed %q", got)
	}
	for _, verb := range []string{"cordon", "uncordon", "drain"} {
		r := runCtl(t, testCtx(), "", "--manager-url", addr, "node", verb, "ghost")
		if r.code != ctlExitNotFound || !strings.Contains(r.stderr, "node ghost") {
			t.Errorf("node %s ghost: exit %d, stderr %q", verb, r.code, r.stderr)
		}
	}
}

// TestCtl_NodeSchedulingHelp: the help says what each command does and
// that the placement engine acts on a drain.
func TestCtl_NodeSchedulingHelp(t *testing.T) {
	cases := map[string][]string{
		"cordon":   {"no new job instances", "keep running", "node_alert", "--reason"},
		"uncordon": {"eligible for new placements", "ends"},
		"drain":    {"placement engine moves", "one replica of a bundle", "engine is the next", "acts as cordoned"},
	}
	for verb, wants := range cases {
		r := runCtl(t, testCtx(), "", "node", verb, "--help")
		for _, want := range wants {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("node %s --help lacks %q:\n%s", verb, want, r.stdout)
			}
		}
	}
}
