package noderesources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// Limits on a worker's product-template catalogue as its hello reports it
// (NodeResources.templates, issue 14 §1). They bound what one hello may
// make the manager store in a node record: at most MaxTemplates names of
// MaxTemplateVersions versions each, every name and version at most
// MaxTemplateNameLen bytes (about 0.5 MB at the worst).
const (
	// MaxTemplates bounds the number of templates a node offers.
	MaxTemplates = 128
	// MaxTemplateVersions bounds the versions of one template.
	MaxTemplateVersions = 64
	// MaxTemplateNameLen bounds a template name or version (bytes).
	MaxTemplateNameLen = 64
)

// TemplateNameProblem says why s cannot be a product template's name or
// version, "" if it can: 1 to MaxTemplateNameLen bytes of ASCII letters,
// digits, '.', '_' and '-' (the catalogue's charset: each is a directory
// name of the worker's --template-dir, NAME/VERSION), and neither "." nor
// ".." (which name no template but a directory around it). The job's
// product_template and the worker's reported catalogue are both checked
// with it. The worker's catalogue is stricter (worker/template.ValidName:
// a letter or digit first, no ".." anywhere), so a name that passes here
// may be one no worker offers; placement then finds no node for it.
func TemplateNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxTemplateNameLen:
		return fmt.Sprintf("%d bytes; at most %d", len(s), MaxTemplateNameLen)
	case s == "." || s == "..":
		return fmt.Sprintf("%q is not a template directory name", s)
	case strings.ContainsFunc(s, func(r rune) bool { return !templateRune(r) }):
		return fmt.Sprintf("%q: only letters, digits, '.', '_' and '-' are allowed", s)
	}
	return ""
}

func templateRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// checkTemplates applies the catalogue rules to a reported list: at most
// MaxTemplates entries, each name valid (TemplateNameProblem) and listed
// once, each with 1 to MaxTemplateVersions versions, each valid and listed
// once. Order is not checked: workers send names and versions sorted, and
// nothing on the manager depends on it. The *FieldError's Key is the
// template's name, or its index when the name itself is the problem.
func checkTemplates(ts []*commonpb.ProductTemplateOffer) error {
	if len(ts) > MaxTemplates {
		return &FieldError{Field: "templates", Reason: fmt.Sprintf("%d templates; at most %d", len(ts), MaxTemplates)}
	}
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		name := t.GetName()
		if why := TemplateNameProblem(name); why != "" {
			return &FieldError{Field: "templates", Key: strconv.Itoa(i), Reason: "name " + why}
		}
		if seen[name] {
			return &FieldError{Field: "templates", Key: name, Reason: "listed twice"}
		}
		seen[name] = true
		vs := t.GetVersions()
		switch {
		case len(vs) == 0:
			return &FieldError{Field: "templates", Key: name, Reason: "no versions"}
		case len(vs) > MaxTemplateVersions:
			return &FieldError{Field: "templates", Key: name, Reason: fmt.Sprintf("%d versions; at most %d", len(vs), MaxTemplateVersions)}
		}
		for j, v := range vs {
			if why := TemplateNameProblem(v); why != "" {
				return &FieldError{Field: "templates", Key: name, Reason: "version " + why}
			}
			if slices.Contains(vs[:j], v) {
				return &FieldError{Field: "templates", Key: name, Reason: fmt.Sprintf("version %q listed twice", v)}
			}
		}
	}
	return nil
}

// OffersTemplate reports whether r's catalogue has template name at
// version (exact, case-sensitive). A nil r (a node whose worker never
// reported resources) offers none.
func OffersTemplate(r *commonpb.NodeResources, name, version string) bool {
	for _, t := range r.GetTemplates() {
		if t.GetName() == name {
			return slices.Contains(t.GetVersions(), version)
		}
	}
	return false
}

// DescribeTemplates renders a catalogue as operators read it, in the order
// reported: "hello (1.0, 1.1), ingest (2)"; "none" for an empty one.
// norsk-ctl's node get and the manager's refusals of a start use it.
func DescribeTemplates(ts []*commonpb.ProductTemplateOffer) string {
	if len(ts) == 0 {
		return "none"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.GetName() + " (" + strings.Join(t.GetVersions(), ", ") + ")"
	}
	return strings.Join(parts, ", ")
}

// TemplateOffersProblem applies the catalogue rules of checkTemplates to a
// declared catalogue (PoolTier.templates) and says what is wrong with it,
// naming the element by index the way a request field is named: path is
// "" (the list), "[i].name", "[i].versions" or "[i].versions[j]", to be
// appended to the field's own name. It returns ("", "") for a valid
// catalogue.
func TemplateOffersProblem(ts []*commonpb.ProductTemplateOffer) (path, reason string) {
	if len(ts) > MaxTemplates {
		return "", fmt.Sprintf("%d templates; at most %d", len(ts), MaxTemplates)
	}
	for i, t := range ts {
		name := t.GetName()
		at := "[" + strconv.Itoa(i) + "]"
		if why := TemplateNameProblem(name); why != "" {
			return at + ".name", why
		}
		if slices.ContainsFunc(ts[:i], func(o *commonpb.ProductTemplateOffer) bool { return o.GetName() == name }) {
			return at + ".name", fmt.Sprintf("%q is listed twice", name)
		}
		vs := t.GetVersions()
		switch {
		case len(vs) == 0:
			return at + ".versions", "no versions; a template is offered at 1 or more"
		case len(vs) > MaxTemplateVersions:
			return at + ".versions", fmt.Sprintf("%d versions; at most %d", len(vs), MaxTemplateVersions)
		}
		for j, v := range vs {
			vat := at + ".versions[" + strconv.Itoa(j) + "]"
			if why := TemplateNameProblem(v); why != "" {
				return vat, why
			}
			if slices.Contains(vs[:j], v) {
				return vat, fmt.Sprintf("%q is listed twice", v)
			}
		}
	}
	return "", ""
}

// DeclaresTemplate reports whether catalogue ts lists template name at
// version (exact, case-sensitive), as OffersTemplate does for a node's
// reported resources.
func DeclaresTemplate(ts []*commonpb.ProductTemplateOffer, name, version string) bool {
	for _, t := range ts {
		if t.GetName() == name {
			return slices.Contains(t.GetVersions(), version)
		}
	}
	return false
}
