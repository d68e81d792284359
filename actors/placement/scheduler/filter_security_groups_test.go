package scheduler

import "testing"

func TestFilter_SecurityGroups(t *testing.T) {
	nodes := []Node{
		node("a"),
		node("b", func(n *Node) { n.SecurityGroups = []string{"sg-ingest"} }),
		node("c", func(n *Node) { n.SecurityGroups = []string{"sg-ingest", "sg-srt"} }),
	}
	withGroups := func(a Ask, gs ...string) Ask { a.SecurityGroups = gs; return a }
	runSelectCases(t, []selectCase{
		{name: "no groups: any node", nodes: nodes, ask: ask("j", 1), want: "a", filtered: map[string]int{}},
		{name: "one group", nodes: nodes, ask: withGroups(ask("j", 1), "sg-ingest"), want: "b",
			filtered: map[string]int{FilterSecurityGroups: 1}},
		{name: "every group", nodes: nodes, ask: withGroups(ask("j", 1), "sg-srt", "sg-ingest"), want: "c",
			filtered: map[string]int{FilterSecurityGroups: 2}},
		{name: "none has it", nodes: nodes, ask: withGroups(ask("j", 1), "sg-other"),
			filtered: map[string]int{FilterSecurityGroups: 3}},
	})
	v, _ := NewView(nodes[:2], nil)
	_, err := v.Select(withGroups(ask("j", 1), "sg-srt"))
	f, ok := err.(*Failure)
	if !ok {
		t.Fatalf("Select: %v; want a *Failure", err)
	}
	want := "constraint security_groups filtered 2 nodes (wants sg-srt; missing sg-srt 2)"
	if got := f.Metrics.Filtered[0].String(); got != want {
		t.Fatalf("text = %q; want %q", got, want)
	}
}
