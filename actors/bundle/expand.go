package bundle

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Tag keys the manager stamps on every derived job. A bundle's job
// templates must not use them (the gateway refuses them with
// InvalidArgument).
const (
	// TagBundleID is the id of the bundle the job derives from.
	TagBundleID = "bundleId"
	// TagReplicaIndex is the replica as a decimal ("0" primary, "1"
	// backup).
	TagReplicaIndex = "replicaIndex"
	// TagJobName is the job spec's job_name.
	TagJobName = "jobName"
	// TagDormant is "true" on a dormant job and absent otherwise.
	TagDormant = "dormant"
)

// ReservedTags lists the tag keys stamped by the manager.
func ReservedTags() []string { return []string{TagBundleID, TagReplicaIndex, TagJobName, TagDormant} }

// IsReservedTag reports whether key is one of ReservedTags in any case
// ("BundleId", "DORMANT"): templates may not use such keys, which would
// read as the manager's tags.
func IsReservedTag(key string) bool {
	for _, k := range ReservedTags() {
		if strings.EqualFold(key, k) {
			return true
		}
	}
	return false
}

// Start modes of a job spec.
const (
	// StartModeAuto ("" is the same) makes derived jobs live at creation.
	StartModeAuto = "auto"
	// StartModeManual creates derived jobs dormant, until StartBundleJob.
	StartModeManual = "manual"
)

// JobID returns the id of the derived job of (bundle, replica, job name):
// "<bundle id>.<replica>.<job name>".
func JobID(bundleID string, replica uint32, jobName string) string {
	return fmt.Sprintf("%s.%d.%s", bundleID, replica, jobName)
}

// Replicas returns how many replicas a bundle runs: 2 with a resilience
// policy (primary and backup), else 1.
func Replicas(b *managerpb.Bundle) uint32 {
	if b.GetResiliencePolicy() != nil {
		return 2
	}
	return 1
}

// Expand returns the derived jobs of b: replica 0 of every job spec in
// order, then replica 1 of each if b has a resilience policy. Each is
// dormant iff its spec's start_mode is "manual"; generations are gen,
// synced generations 0.
func Expand(b *managerpb.Bundle, gen uint64) []*internalpb.BundleJobState {
	id := b.GetBundleId().GetBundleId()
	var out []*internalpb.BundleJobState
	for r := range Replicas(b) {
		for _, spec := range b.GetJobs() {
			out = append(out, &internalpb.BundleJobState{
				JobId: JobID(id, r, spec.GetJobName()), ReplicaIndex: r, JobName: spec.GetJobName(),
				Dormant: spec.GetStartMode() == StartModeManual, Generation: gen,
			})
		}
	}
	return out
}

// spec returns b's job spec named name, or nil.
func spec(b *managerpb.Bundle, name string) *managerpb.BundleJobSpec {
	for _, s := range b.GetJobs() {
		if s.GetJobName() == name {
			return s
		}
	}
	return nil
}

// DerivedJob returns the job definition of one derived job of bundle b:
// the spec's template with the id, tags, auto_placement.requirements and
// the bundle's update_strategy stamped, and state and current_hash
// cleared (the job grain sets them).
// A spec without a template gives an empty job. The result is a fresh
// copy.
func DerivedJob(b *managerpb.Bundle, spec *managerpb.BundleJobSpec, replica uint32, dormant bool) *managerpb.Job {
	j := &managerpb.Job{}
	if spec.GetJob() != nil {
		j = proto.Clone(spec.GetJob()).(*managerpb.Job)
	}
	bid := b.GetBundleId().GetBundleId()
	j.JobId = &commonpb.JobId{JobId: JobID(bid, replica, spec.GetJobName())}
	j.State, j.CurrentHash = managerpb.Job_PRE, 0
	tags := maps.Clone(j.GetTags())
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagBundleID] = bid
	tags[TagReplicaIndex] = strconv.FormatUint(uint64(replica), 10)
	tags[TagJobName] = spec.GetJobName()
	delete(tags, TagDormant)
	if dormant {
		tags[TagDormant] = "true"
	}
	j.Tags = tags
	var req *managerpb.JobRequirements
	if spec.GetRequirements() != nil {
		req = proto.Clone(spec.GetRequirements()).(*managerpb.JobRequirements)
	}
	j.AutoPlacement = &managerpb.AutoPlacement{Requirements: req}
	j.UpdateStrategy = b.GetUpdateStrategy()
	return j
}

// Info returns the public view of a bundle record (GetBundle,
// ListBundles): the bundle, every derived job (replica 0 first, in job
// order, then the jobs being removed), the generation and whether the
// bundle has converged.
func Info(rec *internalpb.BundleRecord) *managerpb.BundleInfo {
	info := &managerpb.BundleInfo{Bundle: rec.GetBundle(), Generation: rec.GetGeneration(), Converged: !rec.GetPendingWork()}
	for _, js := range rec.GetJobs() {
		info.Jobs = append(info.Jobs, jobStatus(js, false))
	}
	for _, js := range rec.GetRemovals() {
		info.Jobs = append(info.Jobs, jobStatus(js, true))
	}
	return info
}

func jobStatus(js *internalpb.BundleJobState, removing bool) *managerpb.BundleJobStatus {
	return &managerpb.BundleJobStatus{
		ReplicaIndex: js.GetReplicaIndex(), JobName: js.GetJobName(), JobId: &commonpb.JobId{JobId: js.GetJobId()},
		Dormant: js.GetDormant(), Synced: !removing && js.GetSyncedGeneration() >= js.GetGeneration(),
		Removing: removing, LastError: js.GetLastError(),
	}
}
