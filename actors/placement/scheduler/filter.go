package scheduler

// Kind says how a filter's count reads to an operator, after Nomad's
// AllocMetric: a constraint rules a node out by what it is ("constraint
// cloud filtered 3 nodes"), an exhausted resource by what is placed on it
// now ("capacity exhausted on 2 nodes").
type Kind int

// The kinds of filter.
const (
	// KindConstraint: a property of the node that the job rules out; it
	// stays ruled out until the node or the job changes.
	KindConstraint Kind = iota
	// KindExhausted: room the node lacks now; it may fit once something
	// placed there stops.
	KindExhausted
)

// String is "constraint" or "exhausted".
func (k Kind) String() string {
	if k == KindExhausted {
		return "exhausted"
	}
	return "constraint"
}

// The filter names, in chain order: the name each count carries in
// Metrics.Filtered, and in the text an operator reads.
const (
	FilterSchedulable        = "schedulable"
	FilterTier               = "tier"
	FilterCloud              = "cloud"
	FilterArchitecture       = "architecture"
	FilterShape              = "shape"
	FilterAvailabilityDomain = "availability_domain"
	FilterSubnet             = "subnet"
	FilterCapabilities       = "capabilities"
	FilterGPUModel           = "gpu_model"
	FilterCoLocate           = "co_locate_with"
	FilterSeparate           = "separate_from"
	FilterCapacity           = "capacity"
	FilterGPUCapacity        = "gpu_capacity"
	FilterCores              = "cores"
)

// epsilon absorbs float error in room checks (float32 GPU units widened,
// sums of placed units): a node with free room within 1e-6 units of the
// need fits.
const epsilon = 1e-6

// filter is one hard rule. check runs once per node per decision, in chain
// order; the first filter that fails a node counts it.
type filter interface {
	// name is one of the Filter* constants.
	name() string
	kind() Kind
	// want says what the ask wants, for the explanation ("CLOUD_AWS",
	// "2 units"); empty when the name says it all.
	want() string
	// check reports whether the node passes and, if not, a short reason
	// an operator reads ("cordoned"); the reason may be empty. It must
	// not modify the view; the tier filter records the node's tier in c.
	check(c *candidate) (ok bool, reason string)
}

// candidate is one node under evaluation.
type candidate struct {
	node  *Node
	usage *usage
	// tier is the index of the cheapest tier the node belongs to; set by
	// the tier filter.
	tier int
}

// need is what the asked job and its co-located members need together.
type need struct {
	capacity     float64
	gpu          float64
	cores        int
	gpuModels    []string
	capabilities []Capability
}

func needOf(a *Ask) need {
	n := need{}
	add := func(r Requirements) {
		n.capacity += r.Capacity
		n.gpu += r.GPUCapacity
		n.cores += r.Cores
		if r.GPUModel != "" && !contains(n.gpuModels, r.GPUModel) {
			n.gpuModels = append(n.gpuModels, r.GPUModel)
		}
		for _, c := range r.Capabilities {
			if !contains(n.capabilities, c) {
				n.capabilities = append(n.capabilities, c)
			}
		}
	}
	add(a.Requirements)
	for _, m := range a.CoLocated {
		add(m.Requirements)
	}
	return n
}

// chain builds the filters the ask needs, in order: cheap properties of the
// node first, then group rules, then room (as Nomad checks constraints
// before bin packing). A filter whose field the ask leaves unset is left
// out.
func chain(v *View, a *Ask, n need) []filter {
	fs := []filter{schedulableFilter{}, newTierFilter(a.Pool, a.Tiers)}
	if len(a.Nodes) > 0 || len(a.ExcludeNodes) > 0 {
		fs = append(fs, nodesFilter{only: a.Nodes, exclude: a.ExcludeNodes})
	}
	fs = append(fs, constraintFilters(a.Constraints)...)
	if len(n.capabilities) > 0 {
		fs = append(fs, capabilitiesFilter{caps: n.capabilities})
	}
	if len(n.gpuModels) > 0 {
		fs = append(fs, gpuModelFilter{models: n.gpuModels})
	}
	if len(a.SecurityGroups) > 0 {
		fs = append(fs, securityGroupsFilter{groups: a.SecurityGroups})
	}
	if ts := templatesOf(a); len(ts) > 0 {
		fs = append(fs, productTemplateFilter{templates: ts})
	}
	if f, ok := newCoLocateFilter(v, a.CoLocateWith); ok {
		fs = append(fs, f)
	}
	if f, ok := newSeparateFilter(v, a.SeparateFrom); ok {
		fs = append(fs, f)
	}
	fs = append(fs, capacityFilter{need: n.capacity})
	if n.gpu > 0 {
		fs = append(fs, gpuCapacityFilter{need: n.gpu})
	}
	if n.cores > 0 {
		fs = append(fs, coresFilter{need: n.cores})
	}
	return fs
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
