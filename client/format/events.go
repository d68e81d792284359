package format

import (
	"fmt"
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// EventLine renders an event of the event stream on one line as
// "#INDEX  KIND  details": the log index left-aligned in 5 columns after "#",
// the kind (see EventDetails) left-aligned in 23, then the details, with
// trailing spaces removed. It never returns an error: an event kind this
// package does not know renders as "unknown".
func EventLine(ev *managerpb.EventStreamEvent) string {
	kind, details := EventDetails(ev)
	line := fmt.Sprintf("#%-5d %-23s", ev.GetLogIndex(), kind)
	if details != "" {
		line += " " + details
	}
	return strings.TrimRight(line, " ")
}

// EventDetails returns the kind of an event (the name of its oneof field in
// EventStreamEvent, such as "node_running" or "job_updated") and its key
// fields as space-separated "key=value" text. An event with no kind set, or
// one newer than this package, returns kind "unknown" and a hint to use JSON
// output.
func EventDetails(ev *managerpb.EventStreamEvent) (kind, details string) {
	switch e := ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeRunning:
		n := e.NodeRunning
		return "node_running", join("node="+NodeOf(n.GetNodeMetadata()), kv("address", NodeAddress(n.GetRunningNodeMetadata())),
			kv("jobs", Instances(n.GetInstances())), kv("tags", Tags(n.GetNodeMetadata().GetTags())))
	case *managerpb.EventStreamEvent_JobActive:
		return "job_active", JobEventDetails(e.JobActive.GetJobWithHistory())
	case *managerpb.EventStreamEvent_InitialDataComplete:
		return "initial_data_complete", join("snapshot complete", HealthList(e.InitialDataComplete.GetHealth()))
	case *managerpb.EventStreamEvent_JobUpdated:
		return "job_updated", JobEventDetails(e.JobUpdated.GetJobWithHistory())
	case *managerpb.EventStreamEvent_JobDeleted:
		return "job_deleted", "job=" + Value(e.JobDeleted.GetJobId().GetJobId())
	case *managerpb.EventStreamEvent_JobPending:
		return "job_pending", JobEventDetails(e.JobPending.GetJobWithHistory())
	case *managerpb.EventStreamEvent_JobOutOfWindow:
		return "job_out_of_window", JobEventDetails(e.JobOutOfWindow.GetJobWithHistory())
	case *managerpb.EventStreamEvent_NodeStarting:
		md := e.NodeStarting.GetNodeMetadata()
		return "node_starting", join("node="+NodeOf(md), kv("tags", Tags(md.GetTags())))
	case *managerpb.EventStreamEvent_NodeStarted:
		n := e.NodeStarted
		return "node_started", join("node="+NodeOf(n.GetNodeMetadata()), kv("address", NodeAddress(n.GetRunningNodeMetadata())))
	case *managerpb.EventStreamEvent_NodeStopping:
		n := e.NodeStopping
		return "node_stopping", fmt.Sprintf("node=%s reason=%s", n.GetNodeId().GetNodeId(), Enum(n.GetReason().String(), ""))
	case *managerpb.EventStreamEvent_NodeStopped:
		return "node_stopped", "node=" + e.NodeStopped.GetNodeId().GetNodeId()
	case *managerpb.EventStreamEvent_PhysicalNodeConnected:
		n := e.PhysicalNodeConnected
		return "physical_node_connected", join("node="+n.GetNode().GetId(), kv("address", n.GetNode().GetIpAddress()),
			kv("jobs", Instances(n.GetInstances())))
	case *managerpb.EventStreamEvent_ProviderHealthChange:
		return "provider_health_change", Health(e.ProviderHealthChange)
	case *managerpb.EventStreamEvent_JobInfo:
		return "job_info", JobInfoDetails(e.JobInfo)
	case *managerpb.EventStreamEvent_BundleUpdated:
		b := e.BundleUpdated.GetBundle()
		return "bundle_updated", fmt.Sprintf("bundle=%s state=%s specs=%d", b.GetBundleId().GetBundleId(),
			Enum(b.GetState().String(), "BUNDLE_STATE_"), len(b.GetJobs()))
	case *managerpb.EventStreamEvent_BundleDeleted:
		return "bundle_deleted", "bundle=" + e.BundleDeleted.GetBundleId().GetBundleId()
	case *managerpb.EventStreamEvent_NodeAlert:
		a := e.NodeAlert
		job := ""
		if k := a.GetJobKey(); k != nil {
			job = fmt.Sprintf(" job=%s role=%s", Value(k.GetJobId().GetJobId()), Value(k.GetRole()))
		}
		return "node_alert", fmt.Sprintf("node=%s kind=%s%s: %s", a.GetNodeId().GetNodeId(),
			strings.ToLower(a.GetKind().String()), job, a.GetMessage())
	case *managerpb.EventStreamEvent_PoolUpdated:
		return "pool_updated", PoolEventDetails(e.PoolUpdated.GetPool())
	case *managerpb.EventStreamEvent_PoolDeleted:
		return "pool_deleted", "pool=" + Value(e.PoolDeleted.GetName().GetName())
	case *managerpb.EventStreamEvent_JobPlaced:
		p := e.JobPlaced
		return "job_placed", join(fmt.Sprintf("job=%s role=%s node=%s", Value(p.GetJobId().GetJobId()), Value(p.GetRole()), Value(p.GetNodeId().GetNodeId())),
			kv("pool", p.GetPool()), kv("tier", p.GetTier()), kv("degraded", strings.Join(p.GetDegradedDomains(), ",")))
	case *managerpb.EventStreamEvent_JobPreempted:
		p := e.JobPreempted
		return "job_preempted", fmt.Sprintf("job=%s role=%s node=%s for=%s/%s: %s", Value(p.GetJobId().GetJobId()), Value(p.GetRole()),
			Value(p.GetNodeId().GetNodeId()), Value(p.GetForJobId().GetJobId()), Value(p.GetForRole()), p.GetReason())
	case *managerpb.EventStreamEvent_PlacementFailed:
		p := e.PlacementFailed
		return "placement_failed", fmt.Sprintf("job=%s role=%s: %s", Value(p.GetJobId().GetJobId()), Value(p.GetRole()), p.GetAttempt().GetReason())
	case *managerpb.EventStreamEvent_PlacementDegraded:
		p := e.PlacementDegraded
		head := join(fmt.Sprintf("job=%s role=%s node=%s state=%s", Value(p.GetJobId().GetJobId()), Value(p.GetRole()),
			Value(p.GetNodeId().GetNodeId()), Enum(p.GetState().String(), "")), kv("domains", strings.Join(p.GetDomains(), ",")))
		if p.GetMessage() == "" {
			return "placement_degraded", head
		}
		return "placement_degraded", head + ": " + p.GetMessage()
	case *managerpb.EventStreamEvent_DefinitionDrift:
		return "definition_drift", e.DefinitionDrift.GetMessage()
	case *managerpb.EventStreamEvent_NodeProvisioning:
		p := e.NodeProvisioning
		return "node_provisioning", fmt.Sprintf("node=%s pool=%s tier=%s offering=%s for=%s", Value(p.GetNodeId().GetNodeId()), Value(p.GetPool()),
			Value(p.GetTier()), Value(p.GetOffering()), Value(strings.Join(p.GetForJobs(), ",")))
	case *managerpb.EventStreamEvent_NodeReleased:
		p := e.NodeReleased
		return "node_released", fmt.Sprintf("node=%s pool=%s tier=%s idle=%ds", Value(p.GetNodeId().GetNodeId()), Value(p.GetPool()),
			Value(p.GetTier()), p.GetIdleSeconds())
	case *managerpb.EventStreamEvent_MigrationStarted:
		return "migration_started", MigrationDetails(e.MigrationStarted.GetJobId().GetJobId(), e.MigrationStarted.GetMigration())
	case *managerpb.EventStreamEvent_MigrationCompleted:
		c := e.MigrationCompleted
		return "migration_completed", fmt.Sprintf("%s handover=%.0fms overlap=%.0fms", MigrationDetails(c.GetJobId().GetJobId(), c.GetMigration()),
			c.GetHandoverMs(), c.GetOverlapMs())
	case *managerpb.EventStreamEvent_MigrationAborted:
		a := e.MigrationAborted
		state := "backing out"
		if a.GetDone() {
			state = "backed out"
		}
		return "migration_aborted", fmt.Sprintf("%s %s: %s", MigrationDetails(a.GetJobId().GetJobId(), a.GetMigration()), state, a.GetReason())
	case *managerpb.EventStreamEvent_StreamReset:
		r := e.StreamReset
		return "stream_reset", fmt.Sprintf("requested=%d retained=%d..%d reason=%q: a fresh snapshot follows",
			r.GetRequestedIndex(), r.GetFirstRetainedIndex(), r.GetHeadIndex(), r.GetReason())
	}
	return "unknown", "(an event kind this client does not know; see norsk-ctl events --json)"
}

// JobEventDetails renders the key fields of an event carrying a job: its id,
// its state (JobState) and, if it has any history, what the newest history
// entry says (HistoryEntry) after "last: ".
func JobEventDetails(jh *managerpb.JobWithHistory) string {
	j := jh.GetJob()
	parts := []string{"job=" + Value(j.GetJobId().GetJobId()), "state=" + JobState(j.GetState())}
	if h := jh.GetHistoryEntry(); len(h) > 0 {
		_, text := HistoryEntry(h[len(h)-1])
		parts = append(parts, "last: "+text)
	}
	return join(parts...)
}

// JobInfoDetails renders a worker's job_info report: the job id and role,
// then the message ("service web started", "[web] exited with status 1",
// "start: starting web"; a container_event without a service, such as the
// worker's "N job info lines dropped" note, without the brackets). A message of a kind this package does not know
// renders as the job id and role only.
func JobInfoDetails(info *commonpb.JobInfoMessage) string {
	head := fmt.Sprintf("job=%s role=%s", Value(info.GetJobKey().GetJobId().GetJobId()), Value(info.GetJobKey().GetRole()))
	switch m := info.GetMessage().(type) {
	case *commonpb.JobInfoMessage_ServiceStarted:
		return head + " service " + m.ServiceStarted.GetServiceName() + " started"
	case *commonpb.JobInfoMessage_ServiceRestarting:
		return head + " service " + m.ServiceRestarting.GetServiceName() + " restarting"
	case *commonpb.JobInfoMessage_ContainerEvent:
		if m.ContainerEvent.GetServiceName() == "" { // about the job, from the worker itself
			return head + " " + m.ContainerEvent.GetText()
		}
		return fmt.Sprintf("%s [%s] %s", head, m.ContainerEvent.GetServiceName(), m.ContainerEvent.GetText())
	case *commonpb.JobInfoMessage_ComposeMessage:
		return fmt.Sprintf("%s %s: %s", head, Enum(m.ComposeMessage.GetStage().String(), ""), m.ComposeMessage.GetText())
	}
	return head
}

// HealthList renders the health of several providers (as carried by
// initial_data_complete), each as Health renders it, separated by spaces.
// Providers that report no regions are left out; "" if none remain.
func HealthList(hs []*managerpb.ProviderHealth) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, Health(h))
	}
	return join(parts...)
}

// Health renders one provider's health per region, in the order given
// ("aws eu-west-1=healthy,us-east-1=unstable"; for OCI the keys are
// availability domains). It returns "" if the provider reports no regions.
func Health(h *managerpb.ProviderHealth) string {
	var parts []string
	for _, r := range h.GetAws().GetRegionHealth() {
		parts = append(parts, r.GetRegion()+"="+Enum(r.GetHealth().String(), ""))
	}
	if len(parts) > 0 {
		return "aws " + strings.Join(parts, ",")
	}
	for _, r := range h.GetOci().GetRegionHealth() {
		parts = append(parts, r.GetAvailabilityDomain()+"="+Enum(r.GetHealth().String(), ""))
	}
	if len(parts) > 0 {
		return "oci " + strings.Join(parts, ",")
	}
	return ""
}

// kv renders "k=v", or "" when v is empty or "-".
func kv(k, v string) string {
	if v == "" || v == "-" {
		return ""
	}
	return k + "=" + v
}

// join joins the non-empty parts with spaces.
func join(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}
