package persistence

import (
	"errors"
	"fmt"
	"slices"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Allocation is what the job instances recorded on one node take of it, in
// reference units (docs/design/nodes-capacity.md). It is derived from the
// replicated job records, so every manager (a new leader's placement
// engine included) computes the same figures.
type Allocation struct {
	// Capacity is the sum of auto_placement.requirements.required_capacity
	// over the node's instances; GPUCapacity the same for
	// required_gpu_capacity. A job without requirements counts 0.
	Capacity    float64
	GPUCapacity float64
	// Instances is the number of instances recorded on the node.
	Instances int
	// PinnedCores are the core ids pinned to the node's instances
	// (Instance.cpu_list), ascending, each once.
	PinnedCores []uint32
}

// JobAllocation returns what one instance of the job rec takes of a node:
// its auto_placement.requirements' required_capacity and
// required_gpu_capacity (0 when unset, and for a job that is not
// auto-placed: a manually started job declares no requirements).
func JobAllocation(rec *internalpb.JobRecord) (capacity, gpu float64) {
	req := rec.GetJob().GetJob().GetAutoPlacement().GetRequirements()
	return req.GetRequiredCapacity(), float64(req.GetRequiredGpuCapacity().GetValue())
}

// NodeAllocations returns the Allocation of every node that job records
// place an instance on (provisioning, running or stopping: a stopping
// instance still runs), by node id; a node with none is absent. Each job
// record is read once. ErrCorrupt for a malformed index key, or for an
// index entry whose job record is missing.
func (r *Reader) NodeAllocations() (map[string]Allocation, error) {
	type units struct {
		capacity, gpu float64
		rec           *internalpb.JobRecord
	}
	jobs := map[string]units{}
	out := map[string]Allocation{}
	err := r.AllInstances(func(node string, ref InstanceRef) error {
		u, ok := jobs[ref.JobID]
		if !ok {
			rec, _, err := r.Job(ref.JobID)
			switch {
			case errors.Is(err, ErrNotFound):
				return fmt.Errorf("instance index names job %q on node %q, which has no record: %w", ref.JobID, node, ErrCorrupt)
			case err != nil:
				return err
			}
			u.capacity, u.gpu = JobAllocation(rec)
			u.rec = rec
			jobs[ref.JobID] = u
		}
		a := out[node]
		a.Capacity += u.capacity
		a.GPUCapacity += u.gpu
		a.Instances++
		for _, in := range u.rec.GetInstances() {
			if in.GetRole() == ref.Role && in.GetNodeId() == node {
				a.PinnedCores = append(a.PinnedCores, in.GetCpuList()...)
			}
		}
		out[node] = a
		return nil
	})
	for node, a := range out {
		if len(a.PinnedCores) > 0 {
			a.PinnedCores = slices.Compact(slices.Sorted(slices.Values(a.PinnedCores)))
			out[node] = a
		}
	}
	return out, err
}
