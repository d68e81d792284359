package main

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/worker"
)

// resourceFlags holds the flags of --mode=worker that say what the worker
// offers for placement (docs/design/nodes-capacity.md).
type resourceFlags struct {
	capacity     unitsFlag
	gpuCapacity  unitsFlag
	gpuModel     string
	capabilities []string // NAME=VALUE
	zone         string
	cores        listFlag // a cpu list; unset = every allowed cpu
	shape        string
	subnet       string
}

// unitsFlag is a float flag that remembers whether it was given, so that
// "not given" (derive the default) differs from an explicit 0 (refused).
type unitsFlag struct {
	v   float64
	set bool
}

// String implements pflag.Value ("" while unset: no default is printed;
// the usage text says how the default is derived).
func (u *unitsFlag) String() string {
	if !u.set {
		return ""
	}
	return strconv.FormatFloat(u.v, 'g', -1, 64)
}

// Set implements pflag.Value.
func (u *unitsFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return errors.New("want a number of reference units, like 4 or 3.5")
	}
	u.v, u.set = v, true
	return nil
}

// Type implements pflag.Value.
func (u *unitsFlag) Type() string { return "units" }

// listFlag is a string flag that remembers whether it was given, so that
// an empty value ("--cores=$CORES" with CORES unset) is refused rather
// than read as "not given".
type listFlag struct {
	v   string
	set bool
}

// String implements pflag.Value.
func (l *listFlag) String() string { return l.v }

// Set implements pflag.Value.
func (l *listFlag) Set(s string) error {
	l.v, l.set = s, true
	return nil
}

// Type implements pflag.Value.
func (l *listFlag) Type() string { return "list" }

// addResourceFlags adds the capacity, GPU, capability and zone flags to cmd.
func addResourceFlags(cmd *cobra.Command, r *resourceFlags) {
	f := cmd.Flags()
	f.Var(&r.capacity, "capacity",
		"worker mode: the node's capacity for placement in reference units (1 unit = one real-time H.264 1080p30 medium-preset encode; a number > 0, e.g. 3.5). "+
			"Default: half the CPUs of --cores (by default every CPU the worker may run on), at least 0.5 (a cautious estimate: benchmark the host and set it). Jobs use units by auto_placement.requirements.required_capacity")
	f.Var(&r.gpuCapacity, "gpu-capacity",
		"worker mode: the node's GPU capacity in the same reference units (default 0: no GPU work is placed on it)")
	f.StringVar(&r.gpuModel, "gpu-model", "",
		"worker mode: the node's GPU model, matched against a job's required_gpu_model (e.g. nvidia-l4)")
	f.StringArrayVar(&r.capabilities, "capability", nil,
		"worker mode: NAME=VALUE, a capability of the node, matched against a job's required_capabilities; repeatable")
	f.StringVar(&r.zone, "zone", "",
		"worker mode: the node's failure domain (a rack, a site; for a cloud node its availability zone or domain), "+
			"so that a job's primary and backup can be kept apart; a job's availabilityDomain matches it. Default: none (a cluster slot's \"zone\" tag applies)")
	f.Var(&r.cores, "cores",
		"worker mode: LIST, the CPUs (Linux ids, e.g. 2-7 or 0,2-5) jobs that require whole cores (required_cores) are pinned to; "+
			"leave the others out to keep them for the host. Default: every CPU the worker may run on (its affinity mask). "+
			"Jobs without required_cores are not pinned")
	f.StringVar(&r.shape, "shape", "",
		"worker mode: the node's shape or instance type, matched against a job's shape (a cloud node created by the manager uses its create request's). Default: none (a \"shape\" tag applies)")
	f.StringVar(&r.subnet, "subnet", "",
		"worker mode: the node's subnet, matched against a job's subnet (an OCI node created by the manager uses its create request's). Default: none (a \"subnet\" tag applies)")
}

// resourceFlagNames maps a noderesources.FieldError field to its flag.
var resourceFlagNames = map[string]string{
	"capacity": "--capacity", "gpu_capacity": "--gpu-capacity", "gpu_model": "--gpu-model",
	"capabilities": "--capability", "zone": "--zone", "cores": "--cores", "shape": "--shape", "subnet": "--subnet",
}

// resources turns the flags into the NodeResources the worker reports,
// given the CPUs the worker may run on (allowed, ascending): the cores
// offered are --cores (each of them allowed) or else every allowed CPU;
// the capacity, when --capacity is not given, is derived from how many
// there are; the architecture is the binary's. Errors name the flag at
// fault.
func (r *resourceFlags) resources(allowed []uint32) (*commonpb.NodeResources, error) {
	res := &commonpb.NodeResources{Capacity: r.capacity.v, GpuCapacity: r.gpuCapacity.v, GpuModel: r.gpuModel, Zone: r.zone,
		Cores: allowed, Shape: r.shape, Subnet: r.subnet}
	if arch, ok := noderesources.HostArchitecture(); ok {
		res.Architecture = &arch
	}
	if r.cores.set {
		cores, err := noderesources.ParseCPUList(r.cores.v)
		if err != nil {
			return nil, fmt.Errorf("--cores %q: %w", r.cores.v, err)
		}
		for _, c := range cores {
			if _, ok := slices.BinarySearch(allowed, c); !ok {
				return nil, fmt.Errorf("--cores %q: cpu %d is not one this worker may run on (its affinity mask allows %s)",
					r.cores.v, c, noderesources.FormatCPURanges(allowed))
			}
		}
		res.Cores = cores
	}
	if !r.capacity.set {
		res.Capacity = noderesources.DefaultCapacity(len(res.Cores))
	}
	for _, c := range r.capabilities {
		name, value, ok := strings.Cut(c, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || name == "" || value == "":
			return nil, fmt.Errorf("--capability %q: want NAME=VALUE, e.g. nvenc=true", c)
		case res.Capabilities[name] != "":
			return nil, fmt.Errorf("--capability %q: %s is given twice", c, name)
		}
		if res.Capabilities == nil {
			res.Capabilities = map[string]string{}
		}
		res.Capabilities[name] = value
	}
	if err := noderesources.Validate(res); err != nil {
		var fe *noderesources.FieldError
		if errors.As(err, &fe) {
			if fe.Key != "" {
				return nil, fmt.Errorf("%s %s: %s", resourceFlagNames[fe.Field], fe.Key, fe.Reason)
			}
			return nil, fmt.Errorf("%s %s", resourceFlagNames[fe.Field], fe.Reason)
		}
		return nil, err
	}
	return res, nil
}

// hostCPUs is the CPUs the worker may run on, the default of --cores and
// the bound of any given; if the affinity mask cannot be read, CPUs
// 0..NumCPU-1.
func hostCPUs() []uint32 {
	if cpus, err := worker.AllowedCPUs(); err == nil {
		return cpus
	}
	cpus := make([]uint32, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = uint32(i)
	}
	return cpus
}
