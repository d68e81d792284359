package noderesources

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// Limits on what a worker may report; the manager refuses more at
// registration (InvalidArgument) and ignores it in a hello.
const (
	// MaxUnits bounds capacity and gpu_capacity (reference units): far
	// above any single machine, low enough that sums stay exact-ish.
	MaxUnits = 1e6
	// MaxCapabilities bounds the number of capabilities.
	MaxCapabilities = 64
	// MaxNameLen bounds a capability name, a zone and a GPU model (bytes).
	MaxNameLen = 128
	// MaxValueLen bounds a capability value (bytes).
	MaxValueLen = 256
)

// DefaultCapacity is the capacity, in reference units, of a worker started
// without --capacity on a host with cores logical CPUs: cores/2, and at
// least 0.5. One unit is one real-time H.264 1080p30 medium-preset encode
// with its decode, audio and packaging; that takes about two logical CPUs
// of a current server core with headroom left for the OS and the worker,
// so half the cores is a cautious start. Operators who benchmarked a host
// set --capacity instead.
func DefaultCapacity(cores int) float64 {
	return max(0.5, float64(cores)/2)
}

// FieldError is a NodeResources field that breaks a rule. Field is the
// proto field name ("capacity", "gpu_capacity", "gpu_model",
// "capabilities", "zone", "cores", "shape", "subnet", "templates"), so
// that callers can name their own flag or request field; Key is the
// capability name for a capabilities error, the template name (or index)
// for a templates error.
type FieldError struct {
	Field  string
	Key    string
	Reason string
}

// Error implements error: "capacity: must be …" or
// "capabilities[nvenc]: …".
func (e *FieldError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s[%s]: %s", e.Field, e.Key, e.Reason)
	}
	return e.Field + ": " + e.Reason
}

// Validate checks r and returns a *FieldError for the first field that
// breaks a rule (in field order; capabilities by name), nil if r is nil or
// valid: capacity finite, > 0 and at most MaxUnits; gpu_capacity finite,
// >= 0 and at most MaxUnits; gpu_model, zone, shape, subnet and capability
// names printable without spaces and at most MaxNameLen bytes; at most
// MaxCapabilities capabilities, each with a non-empty name and a printable
// value of at most MaxValueLen bytes; cores ascending, each once, each at
// most MaxCoreID; templates by checkTemplates (names and versions by
// TemplateNameProblem, bounded by MaxTemplates and MaxTemplateVersions,
// each once). An architecture value this build does not know is
// accepted (a newer worker's) and shown as unknown.
func Validate(r *commonpb.NodeResources) error {
	if r == nil {
		return nil
	}
	if err := checkUnits("capacity", r.GetCapacity(), false); err != nil {
		return err
	}
	if err := checkUnits("gpu_capacity", r.GetGpuCapacity(), true); err != nil {
		return err
	}
	if err := checkName("gpu_model", r.GetGpuModel(), true); err != nil {
		return err
	}
	if len(r.GetCapabilities()) > MaxCapabilities {
		return &FieldError{Field: "capabilities", Reason: fmt.Sprintf("%d capabilities; at most %d", len(r.GetCapabilities()), MaxCapabilities)}
	}
	names := make([]string, 0, len(r.GetCapabilities()))
	for name := range r.GetCapabilities() {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if why := nameProblem(name, false); why != "" {
			return &FieldError{Field: "capabilities", Key: name, Reason: "name " + why}
		}
		if v := r.GetCapabilities()[name]; !printable(v) || len(v) > MaxValueLen {
			return &FieldError{Field: "capabilities", Key: name, Reason: fmt.Sprintf("value %q must be printable, at most %d bytes", v, MaxValueLen)}
		}
	}
	if err := checkName("zone", r.GetZone(), true); err != nil {
		return err
	}
	if err := checkCores(r.GetCores()); err != nil {
		return err
	}
	if err := checkName("shape", r.GetShape(), true); err != nil {
		return err
	}
	if err := checkName("subnet", r.GetSubnet(), true); err != nil {
		return err
	}
	return checkTemplates(r.GetTemplates())
}

func checkUnits(field string, v float64, zeroOK bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return &FieldError{Field: field, Reason: fmt.Sprintf("%v is not a number of reference units", v)}
	case v < 0 || v == 0 && !zeroOK:
		want := "greater than 0"
		if zeroOK {
			want = "0 or more"
		}
		return &FieldError{Field: field, Reason: fmt.Sprintf("%v reference units: must be %s", v, want)}
	case v > MaxUnits:
		return &FieldError{Field: field, Reason: fmt.Sprintf("%v reference units: at most %g", v, float64(MaxUnits))}
	}
	return nil
}

// checkName accepts 1..MaxNameLen bytes of printable characters without
// spaces ("" too when emptyOK).
func checkName(field, s string, emptyOK bool) error {
	if why := nameProblem(s, emptyOK); why != "" {
		return &FieldError{Field: field, Reason: why}
	}
	return nil
}

// nameProblem says why s breaks the name rule of checkName ("" if not).
func nameProblem(s string, emptyOK bool) string {
	switch {
	case s == "" && emptyOK:
		return ""
	case s == "":
		return "must not be empty"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("%d bytes; at most %d", len(s), MaxNameLen)
	case !printable(s) || strings.ContainsFunc(s, unicode.IsSpace):
		return fmt.Sprintf("%q must be printable characters without spaces", s)
	}
	return ""
}

func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar })
}
