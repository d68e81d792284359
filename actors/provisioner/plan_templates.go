package provisioner

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// TemplateRef names a product template at one version, as a job's
// product_template does.
type TemplateRef struct {
	Name    string
	Version string
}

// String is "hello 1.0".
func (t TemplateRef) String() string { return t.Name + " " + t.Version }

// TemplateLieBackoff is how long a tier stays out for a product template
// after a node it created said hello without that template although the
// tier declares it (PoolTier.templates), counted from the node's record:
// its image does not hold what the pool says, and every node created for
// the template would lie the same way, so one is created per hour at most
// rather than one per pass. Fixing the image or the declaration (an
// UpdatePool) does not clear it; the hour does.
const TemplateLieBackoff = time.Hour

// TemplateLie is a tier kept out for a template it declares after a node
// it created said hello without it.
type TemplateLie struct {
	Pool, Tier string
	Template   TemplateRef
	// Node is the last node that said hello without the template.
	Node  string
	Until time.Time
}

// TemplateLies returns the lies in force at now, read from the node
// records (Node.Hello, Node.Offers; the node's CreatedAt starts the
// TemplateLieBackoff), so a new leader decides the same. A node counts
// when the tier it was created for declares a template (name and version)
// its worker's hello does not offer. Sorted by pool, tier, template.
func TemplateLies(pools map[string]*managerpb.Pool, nodes []Node, now time.Time) []TemplateLie {
	byKey := map[string]TemplateLie{}
	for _, n := range nodes {
		if !n.Hello || now.Sub(n.CreatedAt) >= TemplateLieBackoff {
			continue
		}
		tier := findTier(pools[n.Pool], n.Tier)
		for _, decl := range tier.GetTemplates() {
			for _, v := range decl.GetVersions() {
				if noderesources.DeclaresTemplate(n.Offers, decl.GetName(), v) {
					continue
				}
				ref := TemplateRef{Name: decl.GetName(), Version: v}
				k := n.Pool + "\x00" + n.Tier + "\x00" + ref.String()
				until := n.CreatedAt.Add(TemplateLieBackoff)
				if old, ok := byKey[k]; !ok || until.After(old.Until) {
					byKey[k] = TemplateLie{Pool: n.Pool, Tier: n.Tier, Template: ref, Node: n.ID, Until: until}
				}
			}
		}
	}
	out := make([]TemplateLie, 0, len(byKey))
	for _, l := range byKey {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b TemplateLie) int {
		return strings.Compare(a.Pool+"\x00"+a.Tier+"\x00"+a.Template.String(), b.Pool+"\x00"+b.Tier+"\x00"+b.Template.String())
	})
	return out
}

func findTier(p *managerpb.Pool, name string) *managerpb.PoolTier {
	for _, t := range p.GetTiers() {
		if t.GetName() == name {
			return t
		}
	}
	return nil
}

// templatesText renders w's templates for a reason: "hello 1.0" or
// "hello 1.0, ingest 2".
func templatesText(ts []TemplateRef) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, ", ")
}

func declaresAll(decl []*commonpb.ProductTemplateOffer, ts []TemplateRef) (TemplateRef, bool) {
	for _, t := range ts {
		if !noderesources.DeclaresTemplate(decl, t.Name, t.Version) {
			return t, false
		}
	}
	return TemplateRef{}, true
}

// noTierDeclares returns w's unserved reason when no tier of the pool
// declares every template w runs; "" otherwise (or when w runs none).
func (pp *poolPlan) noTierDeclares(w Waiting) string {
	if len(w.Templates) == 0 {
		return ""
	}
	for _, t := range pp.pool.GetTiers() {
		if _, ok := declaresAll(t.GetTemplates(), w.Templates); ok {
			return ""
		}
	}
	return fmt.Sprintf("no tier of pool %s declares product template %s (PoolTier.templates): a new node's catalogue is known "+
		"only from its tier's declaration until its worker says hello", pp.pool.GetName(), templatesText(w.Templates))
}

// templateProblem says why a node of tier i (new, or being created) cannot
// serve w's templates; "" when it can or w runs none.
func (pp *poolPlan) templateProblem(i int, w Waiting) string {
	if len(w.Templates) == 0 {
		return ""
	}
	t := pp.pool.GetTiers()[i]
	if missing, ok := declaresAll(t.GetTemplates(), w.Templates); !ok {
		return fmt.Sprintf("does not declare product template %s", missing)
	}
	for _, ref := range w.Templates {
		if l, ok := pp.lies[pp.pool.GetName()+"\x00"+t.GetName()+"\x00"+ref.String()]; ok {
			return fmt.Sprintf("its node %s said hello without product template %s, which the tier declares; "+
				"kept out for it until %s", l.Node, ref, l.Until.UTC().Format(time.RFC3339))
		}
	}
	return ""
}
