package gateway

import (
	"fmt"
	"math"
	"strings"
	"unicode"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// validateAutoPlacement checks what a job with auto_placement asks of the
// placement engine: its requirements (validateRequirements) and the pool
// its "pool" tag names, which must be a name a pool can have (the
// pool.name rule). A pool that does not exist yet is accepted: pools may
// be created after the jobs that name them (docs/design/pools.md).
func validateAutoPlacement(j *managerpb.Job) error {
	if j.GetAutoPlacement() == nil {
		return nil
	}
	if pool, ok := j.GetTags()[PoolTag]; ok {
		if err := checkPoolName("job.tags["+PoolTag+"]", pool); err != nil {
			return err
		}
	}
	return validateRequirements("job.auto_placement.requirements", j.GetAutoPlacement().GetRequirements())
}

// validateRequirements checks placement requirements (a job's
// auto_placement or a bundle job's) against what any node can offer, so
// that a job the engine could never place is refused at the gateway
// rather than stored and left waiting with "invalid ask"
// (docs/design/placement.md, "The filters"). The rules mirror what a
// worker may report (proto/noderesources.Validate): units finite, 0 to
// noderesources.MaxUnits; required_cores, when set, 1 to
// scheduler.MaxRequiredCores (0 is refused: omit the field to share
// cores); GPU model and capability names printable without spaces, at
// most noderesources.MaxNameLen bytes; capability values non-empty (a
// worker cannot offer an empty one) and printable, at most
// noderesources.MaxValueLen bytes; each capability named once; at most
// noderesources.MaxCapabilities; a known priority band. Errors are
// InvalidArgument naming the field under prefix. nil r is valid.
func validateRequirements(prefix string, r *managerpb.JobRequirements) error {
	if r == nil {
		return nil
	}
	if err := checkUnits(prefix+".required_capacity", r.GetRequiredCapacity()); err != nil {
		return err
	}
	if g := r.GetRequiredGpuCapacity(); g != nil {
		if err := checkUnits(prefix+".required_gpu_capacity", float64(g.GetValue())); err != nil {
			return err
		}
	}
	if c := r.GetRequiredCores(); c != nil && (c.GetValue() == 0 || c.GetValue() > scheduler.MaxRequiredCores) {
		return invalid(prefix+".required_cores", "is %d; it must be 1 to %d whole cores (omit it to share the node's unpinned cores)",
			c.GetValue(), scheduler.MaxRequiredCores)
	}
	if m := r.GetRequiredGpuModel(); m != nil {
		if why := placementNameProblem(m.GetValue()); why != "" {
			return invalid(prefix+".required_gpu_model", "%s (a node's --gpu-model never has another form)", why)
		}
	}
	if err := checkRequiredCapabilities(prefix+".required_capabilities", r.GetRequiredCapabilities()); err != nil {
		return err
	}
	return checkPriorityBand(prefix+".priority_band", r.GetPriorityBand())
}

// checkRequiredCapabilities checks required_capabilities (the rules of
// validateRequirements).
func checkRequiredCapabilities(field string, caps []*managerpb.CapabilityRequirement) error {
	if len(caps) > noderesources.MaxCapabilities {
		return invalid(field, "has %d entries; a node offers at most %d capabilities", len(caps), noderesources.MaxCapabilities)
	}
	seen := map[string]int{}
	for i, c := range caps {
		f := fmt.Sprintf("%s[%d]", field, i)
		if why := placementNameProblem(c.GetName()); why != "" {
			return invalid(f+".name", "%s", why)
		}
		if k, dup := seen[c.GetName()]; dup {
			return invalid(f+".name", "%q is also required by %s[%d]: a node has one value per capability", c.GetName(), field, k)
		}
		seen[c.GetName()] = i
		switch v := c.GetValue(); {
		case v == "":
			return invalid(f+".value", "must not be empty: a node's --capability always has a value (e.g. nvenc=yes)")
		case len(v) > noderesources.MaxValueLen || !printableText(v):
			return invalid(f+".value", "must be printable, at most %d bytes", noderesources.MaxValueLen)
		}
	}
	return nil
}

// checkPriorityBand refuses a priority band this manager does not know.
func checkPriorityBand(field string, b managerpb.PriorityBand) error {
	if _, known := managerpb.PriorityBand_name[int32(b)]; !known {
		return invalid(field, "%d is not a priority band (STANDARD, HIGH or LOW)", b)
	}
	return nil
}

// checkUnits accepts a finite number of reference units from 0 to
// noderesources.MaxUnits (the most a node may offer).
func checkUnits(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return invalid(field, "%v is not a number of reference units", v)
	case v < 0:
		return invalid(field, "%v reference units: must be 0 or more", v)
	case v > noderesources.MaxUnits:
		return invalid(field, "%v reference units: no node offers more than %g", v, float64(noderesources.MaxUnits))
	}
	return nil
}

// placementNameProblem says why s cannot be a node's GPU model or
// capability name ("" if it can): the rule workers are held to.
func placementNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > noderesources.MaxNameLen:
		return fmt.Sprintf("is %d bytes; at most %d", len(s), noderesources.MaxNameLen)
	case !printableText(s) || strings.ContainsFunc(s, unicode.IsSpace):
		return fmt.Sprintf("%q must be printable characters without spaces", s)
	}
	return ""
}

// printableText reports whether s is valid printable text.
func printableText(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar })
}
