package scheduler

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func withTemplates(kv ...string) func(*Node) {
	return func(n *Node) {
		n.Templates = map[string][]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Templates[kv[i]] = append(n.Templates[kv[i]], kv[i+1])
		}
	}
}

func TestFilter_ProductTemplate(t *testing.T) {
	nodes := []Node{
		node("a"),
		node("b", withTemplates("hello", "1.1")),
		node("c", withTemplates("hello", "1.0", "hello", "1.1")),
		node("d", withTemplates("hello", "1.0", "ingest", "2")),
	}
	withTemplate := func(a Ask, name, version string) Ask { a.Template = TemplateRef{name, version}; return a }
	member := func(job, name, version string) Member {
		return Member{Job: JobID(job), Role: RolePrimary, Template: TemplateRef{name, version}}
	}
	grouped := withTemplate(ask("j", 1), "hello", "1.0")
	grouped.CoLocated = []Member{member("m1", "ingest", "2"), member("m2", "hello", "1.0"), member("m3", "", "")}
	runSelectCases(t, []selectCase{
		{name: "no template: any node", nodes: nodes, ask: ask("j", 1), want: "a", filtered: map[string]int{}},
		{name: "name and version", nodes: nodes, ask: withTemplate(ask("j", 1), "hello", "1.0"), want: "c",
			filtered: map[string]int{FilterProductTemplate: 2}},
		{name: "the other version", nodes: nodes, ask: withTemplate(ask("j", 1), "hello", "1.1"), want: "b",
			filtered: map[string]int{FilterProductTemplate: 2}},
		{name: "versions are exact strings", nodes: nodes, ask: withTemplate(ask("j", 1), "hello", "1"),
			filtered: map[string]int{FilterProductTemplate: 4}},
		{name: "names are case-sensitive", nodes: nodes, ask: withTemplate(ask("j", 1), "Hello", "1.0"),
			filtered: map[string]int{FilterProductTemplate: 4}},
		{name: "co-located members' templates too", nodes: nodes, ask: grouped, want: "d",
			filtered: map[string]int{FilterProductTemplate: 3}},
		{name: "schedulable first", nodes: []Node{node("x", withTemplates("hello", "1.0"), func(n *Node) { n.Cordoned = true })},
			ask: withTemplate(ask("j", 1), "hello", "1.0"), filtered: map[string]int{FilterSchedulable: 1}},
		{name: "room after the template", nodes: []Node{node("x", withTemplates("hello", "1.0"), withCapacity(0.5)), node("y")},
			ask: withTemplate(ask("j", 1), "hello", "1.0"), filtered: map[string]int{FilterProductTemplate: 1, FilterCapacity: 1}},
	})

	v, _ := NewView(nodes[:3], nil)
	_, err := v.Select(withTemplate(ask("j", 1), "hello", "2.0"))
	f, ok := err.(*Failure)
	if !ok {
		t.Fatalf("Select: %v; want a *Failure", err)
	}
	want := "constraint product_template filtered 3 nodes (wants hello 2.0; hello in other versions 2, no hello 1)"
	if got := f.Metrics.Filtered[0].String(); got != want {
		t.Fatalf("text = %q; want %q", got, want)
	}
	_, err = v.Select(grouped)
	if f, ok := err.(*Failure); !ok || f.Metrics.Filtered[0].Want != "hello 1.0 and ingest 2" {
		t.Fatalf("Select(group): %v; want a failure wanting both templates", err)
	}
}

func TestTemplatesFromProto(t *testing.T) {
	if TemplatesFromProto(nil) != nil {
		t.Fatal("no catalogue: want nil")
	}
	got := TemplatesFromProto([]*commonpb.ProductTemplateOffer{{Name: "hello", Versions: []string{"1.0", "1.1"}}, {Name: "ingest", Versions: []string{"2"}}})
	if len(got) != 2 || len(got["hello"]) != 2 || got["hello"][1] != "1.1" || got["ingest"][0] != "2" {
		t.Fatalf("TemplatesFromProto = %v", got)
	}
	if r := TemplateFromJob(&managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"}}); r != (TemplateRef{"hello", "1.0"}) {
		t.Fatalf("TemplateFromJob = %v", r)
	}
	if !TemplateFromJob(&managerpb.Job{}).IsZero() || !TemplateFromJob(nil).IsZero() {
		t.Fatal("a job without product_template: want the zero TemplateRef")
	}
}
