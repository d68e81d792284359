package worker

import (
	"context"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Runtime runs the services of jobs on this host. The agent is its only
// caller in production; worker/process implements it with local process
// groups and a Docker runtime will implement it with containers.
//
// Every lifecycle change of a job is reported on Events, whoever caused it:
// a Start that succeeds emits EventStarted, one that fails emits
// EventFailed, a Stop emits EventStopped, and a job that dies on its own
// (a service exhausted its restart policy) emits EventFailed. The agent
// forwards these events to the manager and never synthesises lifecycle
// events from return values, so each (job, role) has exactly one ordered
// history.
//
// All methods are safe for concurrent use. Calls for the same JobKey are
// serialised by the agent; a Runtime must still not corrupt its state if
// they are not.
type Runtime interface {
	// Start prepares and starts every service of job (a WorkerJob as sent in
	// provision_job) and returns the resolved port mappings per service name
	// once all services are started. It emits EventStarted on success and
	// EventFailed (with a reason an operator can read) on failure; it also
	// emits EventInfo progress (compose stages, service started).
	//
	// Start of a (job, role) that is already running changes nothing: it
	// returns the current port mappings and emits EventStarted again, with
	// the running instance's id (job.instance_id of a running job is not
	// taken over).
	// Errors: ErrInvalidJob (wrapped) when the definition cannot run,
	// ErrTemplateUnavailable (wrapped) when its product_template is not in
	// the worker's catalogue, ErrRuntimeClosed after shutdown, ctx.Err() when ctx ends first (the
	// job may still finish starting; its outcome is reported on Events).
	Start(ctx context.Context, job *workerpb.WorkerJob) (PortMappings, error)

	// Stop stops every service of the (job, role) in reverse dependency
	// order: a polite signal first (SIGTERM), a forced kill after grace, per
	// service. It returns when the job has stopped and been cleaned up, and
	// emits EventStopped (with the stopped instance's id). Stop of a (job,
	// role) that is not running returns nil and emits EventStopped without
	// an instance id (InstanceStopper names one). If ctx ends first, Stop
	// returns ctx.Err() and the stop carries on.
	Stop(ctx context.Context, key JobKey, grace time.Duration) error

	// Update replaces the stored definition of a running (job, role)
	// without restarting anything: List reports the new definition, and it
	// is what the job is provisioned with after a Stop and Start. Services
	// that are running, and restarts of them, keep the definition they were
	// started with, and the job keeps its instance id (job.instance_id is
	// ignored). Returns ErrJobNotRunning (wrapped) for an unknown key.
	Update(ctx context.Context, job *workerpb.WorkerJob) error

	// List returns every job the runtime runs now, with its current
	// definition (instance_id: the id it was started with) and resolved
	// ports. The returned values are copies the
	// caller may keep and modify. It does not block on jobs that are busy
	// starting or stopping; a job being stopped is still listed until it
	// has stopped.
	List() []RunningJob

	// Restore re-adopts the jobs a previous worker process left running
	// over the same state, without restarting live services, and applies
	// the restart policy to services that died meanwhile. Call it once,
	// before the first Start; the agent does so at the start of Run.
	// Events for jobs that ended meanwhile (EventFailed, EventStopped) are
	// emitted on Events.
	Restore(ctx context.Context) error

	// Events returns the channel on which the runtime reports lifecycle and
	// info events; the same channel on every call. The agent drains it
	// continuously. A runtime blocks on sending lifecycle events
	// (EventStarted, EventStopped, EventFailed) until they are received or
	// the runtime shuts down, and drops EventInfo when the channel is full.
	// The channel is never closed.
	Events() <-chan Event
}

// InstanceStopper is implemented by runtimes whose Stop can name the
// instance it was meant for (NodeControllerMessage.stop_job's
// instance_id), so that the EventStopped of a stop that finds nothing
// running carries that id: the manager then tells it from the end of a
// later instance of the same (job, role) (docs/design/worker-sessions.md
// §4). The agent calls StopInstance instead of Stop when the runtime
// implements it.
//
// A wrapper that embeds such a runtime and overrides Stop must override
// StopInstance too, or the agent bypasses its Stop.
type InstanceStopper interface {
	// StopInstance is Runtime.Stop, except that the EventStopped of a
	// (job, role) that is not running carries instance (empty: unknown, as
	// Stop). A running instance is stopped whatever its id, and its
	// EventStopped carries its own id.
	StopInstance(ctx context.Context, key JobKey, instance string, grace time.Duration) error
}

// JobID identifies a job (common.JobId).
type JobID string

// NodeID identifies a worker node (common.NodeId); the manager assigns it.
type NodeID string

// JobKey identifies one running instance of a job on a worker: the job id
// and the role it runs under ("primary", "backup", any string).
type JobKey struct {
	JobID JobID
	Role  string
}

// String returns "job/role", for logs.
func (k JobKey) String() string { return string(k.JobID) + "/" + k.Role }

// Proto returns k as a wire ActiveJobKey.
func (k JobKey) Proto() *commonpb.ActiveJobKey {
	return &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: string(k.JobID)}, Role: k.Role}
}

// KeyFromProto converts a wire ActiveJobKey; nil gives the zero JobKey.
func KeyFromProto(k *commonpb.ActiveJobKey) JobKey {
	return JobKey{JobID: JobID(k.GetJobId().GetJobId()), Role: k.GetRole()}
}

// KeyOf returns the (job, role) a WorkerJob runs as.
func KeyOf(job *workerpb.WorkerJob) JobKey {
	return JobKey{JobID: JobID(job.GetJobId().GetJobId()), Role: job.GetRole()}
}

// PortMappings maps a service name to the host ports resolved for it, in
// the shape of WorkerJobStarted.service_port_mappings.
type PortMappings map[string]*commonpb.ResolvedPortMappings

// Clone returns a deep copy of m (nil for nil).
func (m PortMappings) Clone() PortMappings {
	if m == nil {
		return nil
	}
	out := make(PortMappings, len(m))
	for k, v := range m {
		out[k] = proto.Clone(v).(*commonpb.ResolvedPortMappings)
	}
	return out
}

// RunningJob is a job the runtime runs now: its current definition and the
// ports resolved for its services.
type RunningJob struct {
	Job   *workerpb.WorkerJob
	Ports PortMappings
}

// Key returns the (job, role) of r.
func (r RunningJob) Key() JobKey { return KeyOf(r.Job) }

// Proto returns r as a wire WorkerRunningJob (sharing r's messages).
func (r RunningJob) Proto() *workerpb.WorkerRunningJob {
	return &workerpb.WorkerRunningJob{Job: r.Job, ServicePortMappings: r.Ports}
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventStarted: every service of the job is started; Ports is set.
	EventStarted EventKind = iota + 1
	// EventStopped: the job was stopped (or finished: every service
	// completed) and cleaned up.
	EventStopped
	// EventFailed: the job failed and its services are stopped; Reason
	// says why in words an operator understands.
	EventFailed
	// EventInfo: progress or output of a running job; Info is set.
	EventInfo
)

// String returns the kind's name, for logs.
func (k EventKind) String() string {
	switch k {
	case EventStarted:
		return "started"
	case EventStopped:
		return "stopped"
	case EventFailed:
		return "failed"
	case EventInfo:
		return "info"
	default:
		return "unknown"
	}
}

// Lifecycle reports whether k is a lifecycle event (started, stopped,
// failed), as opposed to info.
func (k EventKind) Lifecycle() bool {
	return k == EventStarted || k == EventStopped || k == EventFailed
}

// Event is something a Runtime reports about a job. Receivers must not
// modify Ports or Info.
type Event struct {
	Kind EventKind
	Key  JobKey
	// Instance is the WorkerJob.instance_id of the instance the event is
	// about (lifecycle events; empty: unknown — a job provisioned without
	// one, or recorded by a worker that predates instance ids). Message
	// echoes it to the manager.
	Instance string
	// Ports is the job's resolved port mappings (EventStarted only).
	Ports PortMappings
	// Reason is why the job failed (EventFailed only).
	Reason string
	// Fenced marks an EventStopped of a stop the worker's fence made (set
	// by the agent, never by a Runtime); Message sends it as
	// ActiveJobKey.fenced.
	Fenced bool
	// Info is the job info message (EventInfo only); its job_key and
	// timestamp are set.
	Info *commonpb.JobInfoMessage
}

// Message returns the event as the WorkerMessage the agent sends. The
// instance id goes in job_started.instance_id, job_failed.instance_id and
// job_stopped's ActiveJobKey.instance_id.
func (e Event) Message() *workerpb.WorkerMessage {
	switch e.Kind {
	case EventStarted:
		return &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobStarted{
			JobStarted: &workerpb.WorkerJobStarted{JobKey: e.Key.Proto(), ServicePortMappings: e.Ports, InstanceId: e.Instance},
		}}
	case EventStopped:
		key := e.Key.Proto()
		key.InstanceId = e.Instance
		key.Fenced = e.Fenced
		return &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobStopped{JobStopped: key}}
	case EventFailed:
		return &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobFailed{
			JobFailed: &workerpb.WorkerJobFailed{JobKey: e.Key.Proto(), Reason: e.Reason, InstanceId: e.Instance},
		}}
	default:
		return &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobInfo{JobInfo: e.Info}}
	}
}

// NewInfo builds an EventInfo for key stamped with now; set one field of
// the returned message's oneof before emitting it.
func NewInfo(key JobKey, now time.Time) Event {
	return Event{Kind: EventInfo, Key: key, Info: &commonpb.JobInfoMessage{
		JobKey:    key.Proto(),
		Timestamp: timestamppb.New(now),
	}}
}

// JobDataDeleter is implemented by runtimes that keep resources of a job
// beyond its runs on this host: the Docker runtime's named volumes (the
// job's `volumes`), which survive stop and DOWN so that the next run of
// the job finds them. The agent calls DeleteJobData when the manager
// reports that the job was deleted (NodeControllerMessage.delete_job);
// runtimes without such resources do not implement it.
type JobDataDeleter interface {
	// DeleteJobData removes what the runtime keeps for every role of job
	// id on this host. A role of the job that is still running keeps its
	// resources (they are removed when it is deleted again after it
	// stopped); an unknown job is not an error. Errors are the runtime's
	// (a volume in use, the container engine unreachable) and are logged by
	// the agent; nothing is retried.
	DeleteJobData(ctx context.Context, id JobID) error
}
