package job

import (
	"hash/fnv"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// Hash returns the JobHash of a job definition: FNV-1a 64 over its
// deterministic encoding with current_hash and state cleared (those are the
// manager's, not the definition's). Never 0, so that a client that sends no
// current_hash never matches.
//
// Both are top-level scalars without presence, so the encoding of the job
// with them cleared is the job's own deterministic encoding without their
// top-level fields: Hash hashes that, field by field, into a pooled buffer,
// instead of cloning the job to clear them (a clone and a marshal per
// CreateJob were ~3 % of a manager's CPU; issue 22 §2). hash_test.go holds
// it to the clone's values.
func Hash(j *managerpb.Job) int64 {
	bp := hashBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledHashBuf {
			hashBufs.Put(bp)
		}
	}()
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*bp)[:0], j)
	if err != nil {
		panic("job: marshal for hash: " + err.Error()) // a valid message always marshals
	}
	*bp = b[:0]
	h := fnv.New64a()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			panic("job: hash: own encoding does not parse: " + protowire.ParseError(n).Error())
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			panic("job: hash: own encoding does not parse: " + protowire.ParseError(m).Error())
		}
		if num != jobCurrentHashField && num != jobStateField {
			h.Write(b[:n+m])
		}
		b = b[n+m:]
	}
	if v := int64(h.Sum64()); v != 0 {
		return v
	}
	return 1
}

// The top-level fields of a Job that Hash leaves out (manager.proto).
const (
	jobCurrentHashField protowire.Number = 5
	jobStateField       protowire.Number = 11
)

// hashBufs pools Hash's encoding buffers; one over maxPooledHashBuf (a
// job near the 1 MiB limit) is left to the collector.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledHashBuf = 64 << 10

// WorkerJob is the definition sent to a worker to run (job, role).
func WorkerJob(j *managerpb.Job, role string) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{
		JobId:                      j.GetJobId(),
		Description:                j.GetDescription(),
		Tags:                       j.GetTags(),
		StartDateTime:              j.GetStartDateTime(),
		Services:                   j.GetServices(),
		Role:                       role,
		NorskMediaVersion:          j.GetNorskMediaVersion().String(),
		Volumes:                    j.GetVolumes(),
		NorskServiceParameters:     j.GetNorskServiceParameters(),
		WriteFiles:                 j.GetWriteFiles(),
		NorskCpuList:               j.GetNorskCpuList(),
		LaunchConfigJson:           j.LaunchConfigJson,
		TemplateLaunchDefaultsJson: j.TemplateLaunchDefaultsJson,
		ProductTemplate:            j.GetProductTemplate(),
		ProductTemplateParameters:  j.GetProductTemplateParameters(),
	}
}

// CurrentJob is the JobSearch / snapshot view of a record.
func CurrentJob(rec *internalpb.JobRecord) *managerpb.CurrentJob {
	return &managerpb.CurrentJob{Job: rec.GetJob().GetJob(), Instances: RunningJobs(rec)}
}

// RunningJobs lists a record's instances in the wire shape, with the
// definition each runs and whether it is stale (drift.go).
func RunningJobs(rec *internalpb.JobRecord) []*managerpb.RunningJob {
	j := rec.GetJob().GetJob()
	id := j.GetJobId()
	out := make([]*managerpb.RunningJob, 0, len(rec.GetInstances()))
	for _, in := range rec.GetInstances() {
		out = append(out, &managerpb.RunningJob{
			JobKey:          &commonpb.ActiveJobKey{JobId: id, Role: in.GetRole(), InstanceId: in.GetInstanceId()},
			NodeId:          &commonpb.NodeId{NodeId: in.GetNodeId()},
			DefinitionHash:  in.GetDefinitionHash(),
			DefinitionStale: Stale(j, in),
		})
	}
	return out
}

func updatedEvent(jwh *managerpb.JobWithHistory) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobUpdated{JobUpdated: &managerpb.JobUpdated{JobWithHistory: jwh}}}
}

func deletedEvent(id string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobDeleted{JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: id}}}}
}

// history entry constructors

func hCreated(at *timestamppb.Timestamp) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{JobCreated: &managerpb.JobHistoryJobCreated{Timestamp: at}}}
}

func hUpdated(at *timestamppb.Timestamp, prev *managerpb.Job) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobUpdated{JobUpdated: &managerpb.JobHistoryJobUpdated{Timestamp: at, PreviousJob: prev}}}
}

func hProvisioned(at *timestamppb.Timestamp, in *internalpb.Instance) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{JobProvisioned: &managerpb.JobHistoryJobProvisioned{
		Timestamp: at, Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata(), RunningNodeMetadata: in.GetRunningNodeMetadata()}}}
}

func hRunning(at *timestamppb.Timestamp, in *internalpb.Instance) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobRunning{JobRunning: &managerpb.JobHistoryJobRunning{
		Timestamp: at, Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata(), RunningNodeMetadata: in.GetRunningNodeMetadata(),
		ServicePortMappings: in.GetServicePortMappings()}}}
}

func hStopping(at *timestamppb.Timestamp, in *internalpb.Instance, reason managerpb.JobHistoryJobStopping_Reason) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{JobStopping: &managerpb.JobHistoryJobStopping{
		Timestamp: at, Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata(), RunningNodeMetadata: in.GetRunningNodeMetadata(), Reason: reason}}}
}

func hStopped(at *timestamppb.Timestamp, in *internalpb.Instance) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{JobStopped: &managerpb.JobHistoryJobStopped{
		Timestamp: at, Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata(), RunningNodeMetadata: in.GetRunningNodeMetadata()}}}
}

func hCompleted(at *timestamppb.Timestamp) *managerpb.JobHistoryEntry {
	return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCompleted{JobCompleted: &managerpb.JobHistoryJobCompleted{Timestamp: at}}}
}
