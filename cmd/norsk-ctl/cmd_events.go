package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newEventsCommand builds "norsk-ctl events".
func newEventsCommand() *cobra.Command {
	var window time.Duration
	var resumeFrom uint64
	var jsonLines bool
	cmd := withExitCodes(&cobra.Command{
		Use:   "events [--window 1h] [--resume-from N] [--json]",
		Short: "Follow the manager's event stream until interrupted",
		Long: `Follow the manager's event stream until interrupted (Ctrl-C), one line per
event: time received, log index, kind and the event's key fields.

Without --resume-from the stream starts with a snapshot (running nodes,
active jobs) ending in initial_data_complete, then live events. With
--resume-from N it continues after log index N. A broken stream is resumed
automatically, so every event is printed exactly once; a stream_reset line
means the resume point was lost and a fresh snapshot follows.

--json prints each event as one line of protojson instead.`,
		Example: `  norsk-ctl events
  norsk-ctl events --resume-from 42 --json | jq .`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			if window < 0 {
				return ctlUsagef("--window must not be negative")
			}
			settings := client.EventStreamSettings{PendingWindow: window}
			if e.cmd.Flags().Changed("resume-from") {
				settings.ResumeFromIndex = &resumeFrom
			}
			jsonOut := jsonLines || e.jsonOut
			settings.OnEvent = func(ev *managerpb.EventStreamEvent) error {
				if jsonOut {
					b, err := ctlJSON(ev, "")
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(e.out, "%s\n", b)
					return err
				}
				_, err := fmt.Fprintf(e.out, "%s  %s\n", e.now().Format("15:04:05"), ctlEventLine(ev))
				return err
			}
			sub, err := m.Subscribe(settings)
			if err != nil {
				return ctlUsagef("%v", err)
			}
			err = sub.Run(ctx)
			if last, ok := sub.LastIndex(); ok && errors.Is(err, context.Canceled) {
				fmt.Fprintf(e.errOut, "stopped after log index %d (continue with: norsk-ctl events --resume-from %d)\n", last, last)
			}
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}),
	})
	cmd.Flags().DurationVar(&window, "window", time.Hour, "pending window: jobs starting within it are reported as job_pending")
	cmd.Flags().Uint64Var(&resumeFrom, "resume-from", 0, "continue after this log index instead of starting with a snapshot")
	cmd.Flags().BoolVar(&jsonLines, "json", false, "print each event as one line of protojson")
	return cmd
}

// ctlEventLine renders an event as "#INDEX  KIND  details".
func ctlEventLine(ev *managerpb.EventStreamEvent) string {
	kind, details := ctlEventDetails(ev)
	line := fmt.Sprintf("#%-5d %-23s", ev.GetLogIndex(), kind)
	if details != "" {
		line += " " + details
	}
	return strings.TrimRight(line, " ")
}

// ctlEventDetails returns the kind of an event (its oneof field name) and its
// key fields.
func ctlEventDetails(ev *managerpb.EventStreamEvent) (string, string) {
	switch e := ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeRunning:
		n := e.NodeRunning
		return "node_running", ctlJoin("node="+ctlNodeOf(n.GetNodeMetadata()), ctlKV("address", ctlFmtNodeAddress(n.GetRunningNodeMetadata())),
			ctlKV("jobs", ctlFmtInstances(n.GetInstances())), ctlKV("tags", ctlFmtTags(n.GetNodeMetadata().GetTags())))
	case *managerpb.EventStreamEvent_JobActive:
		return "job_active", ctlJobEventDetails(e.JobActive.GetJobWithHistory())
	case *managerpb.EventStreamEvent_InitialDataComplete:
		return "initial_data_complete", ctlJoin("snapshot complete", ctlFmtHealthList(e.InitialDataComplete.GetHealth()))
	case *managerpb.EventStreamEvent_JobUpdated:
		return "job_updated", ctlJobEventDetails(e.JobUpdated.GetJobWithHistory())
	case *managerpb.EventStreamEvent_JobDeleted:
		return "job_deleted", "job=" + e.JobDeleted.GetJobId().GetJobId()
	case *managerpb.EventStreamEvent_JobPending:
		return "job_pending", ctlJobEventDetails(e.JobPending.GetJobWithHistory())
	case *managerpb.EventStreamEvent_JobOutOfWindow:
		return "job_out_of_window", ctlJobEventDetails(e.JobOutOfWindow.GetJobWithHistory())
	case *managerpb.EventStreamEvent_NodeStarting:
		md := e.NodeStarting.GetNodeMetadata()
		return "node_starting", ctlJoin("node="+ctlNodeOf(md), ctlKV("tags", ctlFmtTags(md.GetTags())))
	case *managerpb.EventStreamEvent_NodeStarted:
		n := e.NodeStarted
		return "node_started", ctlJoin("node="+ctlNodeOf(n.GetNodeMetadata()), ctlKV("address", ctlFmtNodeAddress(n.GetRunningNodeMetadata())))
	case *managerpb.EventStreamEvent_NodeStopping:
		n := e.NodeStopping
		return "node_stopping", fmt.Sprintf("node=%s reason=%s", n.GetNodeId().GetNodeId(), ctlEnum(n.GetReason().String(), ""))
	case *managerpb.EventStreamEvent_NodeStopped:
		return "node_stopped", "node=" + e.NodeStopped.GetNodeId().GetNodeId()
	case *managerpb.EventStreamEvent_PhysicalNodeConnected:
		n := e.PhysicalNodeConnected
		return "physical_node_connected", ctlJoin("node="+n.GetNode().GetId(), ctlKV("address", n.GetNode().GetIpAddress()),
			ctlKV("jobs", ctlFmtInstances(n.GetInstances())))
	case *managerpb.EventStreamEvent_ProviderHealthChange:
		return "provider_health_change", ctlFmtHealth(e.ProviderHealthChange)
	case *managerpb.EventStreamEvent_JobInfo:
		return "job_info", ctlJobInfoDetails(e.JobInfo)
	case *managerpb.EventStreamEvent_StreamReset:
		r := e.StreamReset
		return "stream_reset", fmt.Sprintf("requested=%d retained=%d..%d reason=%q: a fresh snapshot follows",
			r.GetRequestedIndex(), r.GetFirstRetainedIndex(), r.GetHeadIndex(), r.GetReason())
	}
	return "unknown", "(an event this norsk-ctl does not know; use --json)"
}

// ctlJobEventDetails renders the key fields of an event carrying a job: id,
// state, instances and what its newest history entry says.
func ctlJobEventDetails(jh *managerpb.JobWithHistory) string {
	j := jh.GetJob()
	parts := []string{"job=" + j.GetJobId().GetJobId(), "state=" + ctlJobState(j.GetState())}
	if h := jh.GetHistoryEntry(); len(h) > 0 {
		_, text := ctlHistoryEntry(h[len(h)-1])
		parts = append(parts, "last: "+text)
	}
	return ctlJoin(parts...)
}

// ctlJobInfoDetails renders a worker's job_info report.
func ctlJobInfoDetails(info *commonpb.JobInfoMessage) string {
	head := fmt.Sprintf("job=%s role=%s", info.GetJobKey().GetJobId().GetJobId(), info.GetJobKey().GetRole())
	switch m := info.GetMessage().(type) {
	case *commonpb.JobInfoMessage_ServiceStarted:
		return head + " service " + m.ServiceStarted.GetServiceName() + " started"
	case *commonpb.JobInfoMessage_ServiceRestarting:
		return head + " service " + m.ServiceRestarting.GetServiceName() + " restarting"
	case *commonpb.JobInfoMessage_ContainerEvent:
		return fmt.Sprintf("%s [%s] %s", head, m.ContainerEvent.GetServiceName(), m.ContainerEvent.GetText())
	case *commonpb.JobInfoMessage_ComposeMessage:
		return fmt.Sprintf("%s %s: %s", head, ctlEnum(m.ComposeMessage.GetStage().String(), ""), m.ComposeMessage.GetText())
	}
	return head
}

// ctlFmtHealthList renders the provider health of initial_data_complete.
func ctlFmtHealthList(hs []*managerpb.ProviderHealth) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, ctlFmtHealth(h))
	}
	return ctlJoin(parts...)
}

// ctlFmtHealth renders one provider's health per region ("aws
// eu-west-1=healthy").
func ctlFmtHealth(h *managerpb.ProviderHealth) string {
	var parts []string
	for _, r := range h.GetAws().GetRegionHealth() {
		parts = append(parts, r.GetRegion()+"="+ctlEnum(r.GetHealth().String(), ""))
	}
	if len(parts) > 0 {
		return "aws " + strings.Join(parts, ",")
	}
	for _, r := range h.GetOci().GetRegionHealth() {
		parts = append(parts, r.GetAvailabilityDomain()+"="+ctlEnum(r.GetHealth().String(), ""))
	}
	if len(parts) > 0 {
		return "oci " + strings.Join(parts, ",")
	}
	return ""
}

// ctlKV renders "k=v", or "" when v is empty or "-".
func ctlKV(k, v string) string {
	if v == "" || v == "-" {
		return ""
	}
	return k + "=" + v
}

// ctlJoin joins the non-empty parts with spaces.
func ctlJoin(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}
