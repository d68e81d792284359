package clienttest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Manager is the in-memory fake. Create it with NewManager; it is safe for
// concurrent use. Every message it returns or streams is a copy.
type Manager struct {
	managerpb.UnimplementedManagerServer

	// now is the clock stamped into history entries and node records.
	now func() time.Time

	mu struct {
		sync.Mutex
		seq     int64                             // source of ids, tokens and hashes
		jobs    map[string]*fakeJob               // by job id
		nodes   map[string]*managerpb.NodeInfo    // by node id
		slots   map[string]*managerpb.ClusterNode // by node id
		errors  map[string]error                  // injected, by method ("" = all)
		events  eventLog
		members *managerpb.ClusterMembersResponse // nil: ClusterMembers is Unimplemented
		// pageSize pages ListNodes and ListClusterNodes (SetPageSize).
		pageSize int
	}
	// snap is what SnapshotSave streams (snapshot.go).
	snap snapshotState
}

// fakeJob is one stored job.
type fakeJob struct {
	job       *managerpb.Job
	history   []*managerpb.JobHistoryEntry
	instances []*managerpb.RunningJob
}

// ManagerVersion is the manager_version the fake's Version answers.
const ManagerVersion = "0.0.0-clienttest"

// NewManager returns an empty fake whose clock is now (nil: time.Now).
func NewManager(now func() time.Time) *Manager {
	if now == nil {
		now = time.Now
	}
	m := &Manager{now: now}
	m.mu.jobs = make(map[string]*fakeJob)
	m.mu.nodes = make(map[string]*managerpb.NodeInfo)
	m.mu.slots = make(map[string]*managerpb.ClusterNode)
	m.mu.errors = make(map[string]error)
	m.mu.events.init(now)
	return m
}

// Fail makes every later call of method (the RPC name, e.g. "JobById"; ""
// for every RPC) fail with err, a gRPC status error; nil clears it.
func (m *Manager) Fail(method string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.mu.errors, method)
		return
	}
	m.mu.errors[method] = err
}

// injectedLocked returns the error injected for method, if any.
func (m *Manager) injectedLocked(method string) error {
	if err := m.mu.errors[method]; err != nil {
		return err
	}
	return m.mu.errors[""]
}

// nextLocked returns a fresh sequence number.
func (m *Manager) nextLocked() int64 {
	m.mu.seq++
	return m.mu.seq
}

// Version answers ManagerVersion.
func (m *Manager) Version(context.Context, *emptypb.Empty) (*managerpb.VersionInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("Version"); err != nil {
		return nil, err
	}
	return &managerpb.VersionInfo{
		Version:        &commonpb.Version{MajorVersion: 1, MinorVersion: 0, BuildNumber: 384},
		ManagerVersion: ManagerVersion,
		GoVersion:      "go-fake",
	}, nil
}

// CreateStatusChannel sends a Hello and then nothing until the client goes.
func (m *Manager) CreateStatusChannel(_ *emptypb.Empty, stream managerpb.Manager_CreateStatusChannelServer) error {
	m.mu.Lock()
	err := m.injectedLocked("CreateStatusChannel")
	m.mu.Unlock()
	if err != nil {
		return err
	}
	hello := &managerpb.NorskStatusEvent{Message: &managerpb.NorskStatusEvent_Hello{
		Hello: &managerpb.Hello{Version: &commonpb.Version{MajorVersion: 1, BuildNumber: 384}},
	}}
	if err := stream.Send(hello); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// CreateJob stores a new job (state ACTIVE, or PRE if it starts in the
// future) and publishes job_updated.
func (m *Manager) CreateJob(_ context.Context, in *managerpb.Job) (*managerpb.JobHash, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("CreateJob"); err != nil {
		return nil, err
	}
	id := in.GetJobId().GetJobId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "job.job_id: must not be empty")
	}
	if _, ok := m.mu.jobs[id]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "job %q already exists", id)
	}
	j := &fakeJob{job: proto.Clone(in).(*managerpb.Job)}
	j.job.CurrentHash = 1000 + m.nextLocked()
	j.job.State = managerpb.Job_ACTIVE
	if st := j.job.GetStartDateTime(); st != nil && st.AsTime().After(m.now()) {
		j.job.State = managerpb.Job_PRE
	}
	j.history = append(j.history, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{
		JobCreated: &managerpb.JobHistoryJobCreated{Timestamp: m.stamp()},
	}})
	m.mu.jobs[id] = j
	m.publishJobLocked(j)
	return &managerpb.JobHash{Hash: j.job.GetCurrentHash()}, nil
}

// UpdateJob replaces a job if current_hash matches and publishes
// job_updated.
func (m *Manager) UpdateJob(_ context.Context, in *managerpb.Job) (*managerpb.JobHash, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("UpdateJob"); err != nil {
		return nil, err
	}
	j, err := m.jobLocked(in.GetJobId().GetJobId())
	if err != nil {
		return nil, err
	}
	if in.GetCurrentHash() != j.job.GetCurrentHash() {
		return nil, status.Errorf(codes.FailedPrecondition, "job %q: current_hash %d is stale (the job is at %d)",
			in.GetJobId().GetJobId(), in.GetCurrentHash(), j.job.GetCurrentHash())
	}
	prev := j.job
	j.job = proto.Clone(in).(*managerpb.Job)
	j.job.CurrentHash = 1000 + m.nextLocked()
	j.job.State = prev.GetState()
	j.history = append(j.history, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobUpdated{
		JobUpdated: &managerpb.JobHistoryJobUpdated{Timestamp: m.stamp(), PreviousJob: prev},
	}})
	m.publishJobLocked(j)
	return &managerpb.JobHash{Hash: j.job.GetCurrentHash()}, nil
}

// DeleteJob removes a job and publishes job_deleted.
func (m *Manager) DeleteJob(_ context.Context, in *commonpb.JobId) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("DeleteJob"); err != nil {
		return nil, err
	}
	if _, err := m.jobLocked(in.GetJobId()); err != nil {
		return nil, err
	}
	delete(m.mu.jobs, in.GetJobId())
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobDeleted{
		JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: in.GetJobId()}},
	}})
	return &emptypb.Empty{}, nil
}

// JobById returns a job with its history and instances.
func (m *Manager) JobById(_ context.Context, in *commonpb.JobId) (*managerpb.JobByIdResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("JobById"); err != nil {
		return nil, err
	}
	j, err := m.jobLocked(in.GetJobId())
	if err != nil {
		return nil, err
	}
	return &managerpb.JobByIdResponse{Job: j.withHistory(), Instances: cloneAll(j.instances)}, nil
}

// JobSearch streams the jobs matching every filter, sorted by id.
func (m *Manager) JobSearch(in *managerpb.JobSearchRequest, stream managerpb.Manager_JobSearchServer) error {
	m.mu.Lock()
	if err := m.injectedLocked("JobSearch"); err != nil {
		m.mu.Unlock()
		return err
	}
	var found []*managerpb.CurrentJob
	for _, id := range sortedKeys(m.mu.jobs) {
		j := m.mu.jobs[id]
		ok, err := matchAll(j.job, in.GetJobFilter())
		if err != nil {
			m.mu.Unlock()
			return err
		}
		if ok {
			found = append(found, &managerpb.CurrentJob{Job: proto.Clone(j.job).(*managerpb.Job), Instances: cloneAll(j.instances)})
		}
	}
	m.mu.Unlock()
	for _, cj := range found {
		if err := stream.Send(cj); err != nil {
			return err
		}
	}
	return nil
}

// StartJob records a running instance (job_provisioned and job_running
// history) and publishes job_updated.
func (m *Manager) StartJob(_ context.Context, in *managerpb.StartJobRequest) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("StartJob"); err != nil {
		return nil, err
	}
	j, err := m.jobLocked(in.GetJobId().GetJobId())
	if err != nil {
		return nil, err
	}
	node, ok := m.mu.nodes[in.GetNodeId().GetNodeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q not found", in.GetNodeId().GetNodeId())
	}
	if j.job.GetState() == managerpb.Job_POST {
		return nil, status.Errorf(codes.FailedPrecondition, "job %q is completed", in.GetJobId().GetJobId())
	}
	if j.instanceIndex(in.GetRole()) >= 0 {
		return nil, status.Errorf(codes.AlreadyExists, "job %q already runs as %q", in.GetJobId().GetJobId(), in.GetRole())
	}
	key := &commonpb.ActiveJobKey{JobId: proto.Clone(in.GetJobId()).(*commonpb.JobId), Role: in.GetRole()}
	rj := &managerpb.RunningJob{JobKey: key, NodeId: proto.Clone(in.GetNodeId()).(*commonpb.NodeId)}
	j.instances = append(j.instances, rj)
	node.Instances = append(node.Instances, proto.Clone(rj).(*managerpb.RunningJob))
	j.job.State = managerpb.Job_ACTIVE
	md := node.GetMetadata()
	j.history = append(j.history,
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{
			JobProvisioned: &managerpb.JobHistoryJobProvisioned{Timestamp: m.stamp(), Role: in.GetRole(), NodeMetadata: md},
		}},
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobRunning{
			JobRunning: &managerpb.JobHistoryJobRunning{Timestamp: m.stamp(), Role: in.GetRole(), NodeMetadata: md},
		}})
	m.publishJobLocked(j)
	return &emptypb.Empty{}, nil
}

// StopJob removes a running instance (job_stopping with USER_REQUESTED and
// job_stopped history) and publishes job_updated.
func (m *Manager) StopJob(_ context.Context, in *managerpb.StopJobRequest) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("StopJob"); err != nil {
		return nil, err
	}
	j, err := m.jobLocked(in.GetJobId().GetJobId())
	if err != nil {
		return nil, err
	}
	i := j.instanceIndex(in.GetRole())
	if i < 0 || j.instances[i].GetNodeId().GetNodeId() != in.GetNodeId().GetNodeId() {
		return nil, status.Errorf(codes.NotFound, "job %q has no %q instance on node %q",
			in.GetJobId().GetJobId(), in.GetRole(), in.GetNodeId().GetNodeId())
	}
	m.stopInstanceLocked(j, i, managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED)
	m.publishJobLocked(j)
	return &emptypb.Empty{}, nil
}

// CompleteJob stops every instance, sets state POST and publishes
// job_updated.
func (m *Manager) CompleteJob(_ context.Context, in *commonpb.JobId) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("CompleteJob"); err != nil {
		return nil, err
	}
	j, err := m.jobLocked(in.GetJobId())
	if err != nil {
		return nil, err
	}
	for len(j.instances) > 0 {
		m.stopInstanceLocked(j, 0, managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED)
	}
	j.job.State = managerpb.Job_POST
	j.history = append(j.history, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCompleted{
		JobCompleted: &managerpb.JobHistoryJobCompleted{Timestamp: m.stamp()},
	}})
	m.publishJobLocked(j)
	return &emptypb.Empty{}, nil
}

// stopInstanceLocked removes instance i of j from the job and its node and
// appends the stopping and stopped history entries.
func (m *Manager) stopInstanceLocked(j *fakeJob, i int, reason managerpb.JobHistoryJobStopping_Reason) {
	rj := j.instances[i]
	j.instances = slices.Delete(j.instances, i, i+1)
	var md *commonpb.NodeMetadata
	if node, ok := m.mu.nodes[rj.GetNodeId().GetNodeId()]; ok {
		md = node.GetMetadata()
		node.Instances = slices.DeleteFunc(node.Instances, func(x *managerpb.RunningJob) bool { return proto.Equal(x, rj) })
	}
	role := rj.GetJobKey().GetRole()
	j.history = append(j.history,
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{
			JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: m.stamp(), Role: role, NodeMetadata: md, Reason: reason},
		}},
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{
			JobStopped: &managerpb.JobHistoryJobStopped{Timestamp: m.stamp(), Role: role, NodeMetadata: md},
		}})
}

// jobLocked returns the job id or a NotFound status.
func (m *Manager) jobLocked(id string) (*fakeJob, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "job_id: must not be empty")
	}
	j, ok := m.mu.jobs[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %q not found", id)
	}
	return j, nil
}

// publishJobLocked appends job_updated for j.
func (m *Manager) publishJobLocked(j *fakeJob) {
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobUpdated{
		JobUpdated: &managerpb.JobUpdated{JobWithHistory: j.withHistory()},
	}})
}

// stamp is the current time as a timestamp.
func (m *Manager) stamp() *timestamppb.Timestamp { return timestamppb.New(m.now()) }

// withHistory returns a copy of j as a JobWithHistory.
func (j *fakeJob) withHistory() *managerpb.JobWithHistory {
	return &managerpb.JobWithHistory{Job: proto.Clone(j.job).(*managerpb.Job), HistoryEntry: cloneAll(j.history)}
}

// instanceIndex returns the index of the instance running as role, or -1.
func (j *fakeJob) instanceIndex(role string) int {
	return slices.IndexFunc(j.instances, func(rj *managerpb.RunningJob) bool { return rj.GetJobKey().GetRole() == role })
}

// cloneAll deep-copies a slice of messages.
func cloneAll[T proto.Message](in []T) []T {
	out := make([]T, 0, len(in))
	for _, x := range in {
		out = append(out, proto.Clone(x).(T))
	}
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// idString is fmt.Sprintf for minted ids.
func idString(prefix string, n int64) string { return fmt.Sprintf("%s-%d", prefix, n) }
