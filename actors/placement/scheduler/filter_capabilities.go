package scheduler

import "strings"

// capabilitiesFilter removes nodes missing a required capability: the node
// must carry every NAME with exactly the VALUE required (issue 11 §3). The
// reason names the first capability missing, so the counts say which one
// rules nodes out.
type capabilitiesFilter struct {
	caps []Capability
}

func (capabilitiesFilter) name() string { return FilterCapabilities }
func (capabilitiesFilter) kind() Kind   { return KindConstraint }

func (f capabilitiesFilter) want() string {
	parts := make([]string, len(f.caps))
	for i, c := range f.caps {
		parts[i] = c.Name + "=" + c.Value
	}
	return strings.Join(parts, ", ")
}

func (f capabilitiesFilter) check(c *candidate) (bool, string) {
	for _, want := range f.caps {
		if got, ok := c.node.Capabilities[want.Name]; !ok || got != want.Value {
			return false, "missing " + want.Name + "=" + want.Value
		}
	}
	return true, ""
}

// gpuModelFilter removes nodes whose GPU model is not the required one
// (exact match). Co-located jobs requiring two different models fit
// nowhere, and say so.
type gpuModelFilter struct {
	models []string
}

func (gpuModelFilter) name() string   { return FilterGPUModel }
func (gpuModelFilter) kind() Kind     { return KindConstraint }
func (f gpuModelFilter) want() string { return strings.Join(f.models, " and ") }

func (f gpuModelFilter) check(c *candidate) (bool, string) {
	if len(f.models) > 1 {
		return false, "co-located jobs require different gpu models"
	}
	return c.node.GPUModel == f.models[0], ""
}
