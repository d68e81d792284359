package scheduler

import (
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// RequirementsFromProto converts a job's stored requirements; nil gives the
// zero Requirements (no capacity, shared cores, no GPU). The float32 GPU
// capacity is widened to float64.
func RequirementsFromProto(r *managerpb.JobRequirements) Requirements {
	if r == nil {
		return Requirements{}
	}
	req := Requirements{
		Capacity:    r.GetRequiredCapacity(),
		Cores:       int(r.GetRequiredCores().GetValue()),
		GPUCapacity: float64(r.GetRequiredGpuCapacity().GetValue()),
		GPUModel:    r.GetRequiredGpuModel().GetValue(),
	}
	for _, c := range r.GetRequiredCapabilities() {
		req.Capabilities = append(req.Capabilities, Capability{Name: c.GetName(), Value: c.GetValue()})
	}
	return req
}

// ConstraintsFromJob copies a job's placement fields (cloud, architecture,
// shape, availabilityDomain, subnet); nil gives no constraints. The
// architecture is normalized (noderesources.NormalizeArchitecture: "amd64"
// and "x86_64" both ask for x86_64, "arm64" for aarch64), as nodes name
// theirs; the others are compared exactly.
func ConstraintsFromJob(j *managerpb.Job) Constraints {
	return Constraints{
		Cloud:              j.GetCloud(),
		Architecture:       noderesources.NormalizeArchitecture(j.GetArchitecture()),
		Shape:              j.GetShape(),
		AvailabilityDomain: j.GetAvailabilityDomain(),
		Subnet:             j.GetSubnet(),
	}
}

// AntiAffinityFromProto reads a bundle's resilience policy: each
// ANTI_AFFINITY_FORBID becomes true; nil (no backup) gives none.
func AntiAffinityFromProto(p *managerpb.ResiliencePolicy) AntiAffinity {
	forbid := managerpb.AntiAffinity_ANTI_AFFINITY_FORBID
	return AntiAffinity{
		Node:  p.GetSameNode() == forbid,
		Zone:  p.GetSameAz() == forbid,
		Cloud: p.GetSameCloud() == forbid,
	}
}
