package scheduler

import (
	"slices"
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// FilterProductTemplate is the name of the product-template filter (issue
// 14 §1: a job with a product template is placed only on a node whose
// worker offers that template at that version).
const FilterProductTemplate = "product_template"

// TemplateRef names a product template and one of its versions, as a job's
// product_template does. The zero value is no template.
type TemplateRef struct {
	Name    string
	Version string
}

// IsZero reports whether t names no template.
func (t TemplateRef) IsZero() bool { return t == TemplateRef{} }

// String is "hello 1.0".
func (t TemplateRef) String() string { return t.Name + " " + t.Version }

// TemplateFromJob is j's product template; the zero TemplateRef when it
// has none (or j is nil).
func TemplateFromJob(j *managerpb.Job) TemplateRef {
	t := j.GetProductTemplate()
	return TemplateRef{Name: t.GetName(), Version: t.GetVersion()}
}

// TemplatesFromProto turns a node's reported catalogue
// (NodeResources.templates) into Node.Templates: name → versions. nil for
// none. A name listed twice (which validation refuses) keeps every version.
func TemplatesFromProto(ts []*commonpb.ProductTemplateOffer) map[string][]string {
	if len(ts) == 0 {
		return nil
	}
	m := make(map[string][]string, len(ts))
	for _, t := range ts {
		m[t.GetName()] = append(m[t.GetName()], t.GetVersions()...)
	}
	return m
}

// templatesOf lists the templates the ask and its co-located members run,
// each once, in the order met: the node must offer every one.
func templatesOf(a *Ask) []TemplateRef {
	var ts []TemplateRef
	add := func(t TemplateRef) {
		if !t.IsZero() && !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	add(a.Template)
	for _, m := range a.CoLocated {
		add(m.Template)
	}
	return ts
}

// productTemplateFilter removes nodes whose worker does not offer one of
// the templates the job (and its co-located members) run, at the exact
// version (compared as strings, case-sensitive). A node whose worker
// reported no catalogue offers none. The reason says whether the node
// lacks the template or only the version, naming the first missing one:
// "no hello", "hello in other versions".
type productTemplateFilter struct {
	templates []TemplateRef
}

func (productTemplateFilter) name() string { return FilterProductTemplate }
func (productTemplateFilter) kind() Kind   { return KindConstraint }

func (f productTemplateFilter) want() string {
	parts := make([]string, len(f.templates))
	for i, t := range f.templates {
		parts[i] = t.String()
	}
	return strings.Join(parts, " and ")
}

func (f productTemplateFilter) check(c *candidate) (bool, string) {
	for _, t := range f.templates {
		versions, ok := c.node.Templates[t.Name]
		switch {
		case !ok:
			return false, "no " + t.Name
		case !slices.Contains(versions, t.Version):
			return false, t.Name + " in other versions"
		}
	}
	return true, ""
}
