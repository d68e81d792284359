package gateway

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// Limits on a job's product-template parameters (issue 14 §1): each is an
// interpolation variable of the template's compose file, passed to the
// worker as an environment value. Their number is bounded by
// checkJobCounts (maxJobTags).
const (
	// maxTemplateParamName bounds a parameter's name (bytes).
	maxTemplateParamName = 256
	// maxTemplateParamValue bounds a parameter's value (bytes).
	maxTemplateParamValue = 32 << 10
)

// validateProductTemplate checks a job's product_template and its
// parameters (issue 14 §1): the name and version as the worker's
// catalogue names its directories (noderesources.TemplateNameProblem:
// letters, digits, '.', '_', '-', at most 64 bytes; a job naming neither
// a template nor a version sets no template); each parameter name an
// environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256 bytes),
// each value valid UTF-8 without NUL, at most 32 KiB. launch_config_json and
// template_launch_defaults_json stay opaque (the job's 1 MiB bound covers
// them). InvalidArgument naming the field.
func validateProductTemplate(j *managerpb.Job) error {
	t := j.GetProductTemplate()
	if t != nil && (t.GetName() != "" || t.GetVersion() != "") {
		if why := noderesources.TemplateNameProblem(t.GetName()); why != "" {
			return invalid("job.product_template.name", "%s", why)
		}
		if why := noderesources.TemplateNameProblem(t.GetVersion()); why != "" {
			return invalid("job.product_template.version", "%s", why)
		}
	}
	names := make([]string, 0, len(j.GetProductTemplateParameters()))
	for k := range j.GetProductTemplateParameters() {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		field := fmt.Sprintf("job.product_template_parameters[%q]", k)
		if why := envNameProblem(k); why != "" {
			return invalid(field, "%s", why)
		}
		v := j.GetProductTemplateParameters()[k]
		if len(v) > maxTemplateParamValue || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return invalid(field, "value must be valid UTF-8 without NUL, at most %d bytes", maxTemplateParamValue)
		}
	}
	return nil
}

// envNameProblem says why s is not an environment variable name
// ([A-Za-z_][A-Za-z0-9_]*, at most maxTemplateParamName bytes), "" if it
// is.
func envNameProblem(s string) string {
	switch {
	case s == "":
		return "name must not be empty"
	case len(s) > maxTemplateParamName:
		return fmt.Sprintf("name is %d bytes; at most %d", len(s), maxTemplateParamName)
	case s[0] >= '0' && s[0] <= '9':
		return "name must not start with a digit (an environment variable name: [A-Za-z_][A-Za-z0-9_]*)"
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Sprintf("name has %q; want an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", r)
		}
	}
	return ""
}
