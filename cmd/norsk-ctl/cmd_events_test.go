package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestCtlEventLine(t *testing.T) {
	nodeMD := &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n1"}, Tags: map[string]string{"pool": "a"}}
	running := &commonpb.RunningNodeMetadata{PrivateIpAddress: "10.0.0.5"}
	key := &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "j1"}, Role: "primary"}
	instances := []*managerpb.RunningJob{{JobKey: key, NodeId: &commonpb.NodeId{NodeId: "n1"}}}
	jobWH := &managerpb.JobWithHistory{
		Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j1"}, State: managerpb.Job_ACTIVE},
		HistoryEntry: []*managerpb.JobHistoryEntry{
			{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{JobCreated: &managerpb.JobHistoryJobCreated{}}},
			{HistoryEntry: &managerpb.JobHistoryEntry_JobRunning{JobRunning: &managerpb.JobHistoryJobRunning{
				Role: "primary", NodeMetadata: nodeMD,
				ServicePortMappings: map[string]*commonpb.ResolvedPortMappings{"web": {Mappings: []*commonpb.ResolvedPortMapping{
					{Url: "tcp://127.0.0.1:18080", Target: 8080, Published: 18080, Protocol: commonpb.ProtocolFamily_TCP},
					{Url: "udp://127.0.0.1:18081", Target: 5000, Published: 18081, Protocol: commonpb.ProtocolFamily_UDP},
				}}, "api": {Mappings: []*commonpb.ResolvedPortMapping{
					{Url: "10.0.0.5", Target: 9000, Published: 19000, Protocol: commonpb.ProtocolFamily_TCP},
					{Target: 9001, Published: 19001},
				}}},
			}}},
		},
	}
	jobInfo := func(m *commonpb.JobInfoMessage) *managerpb.EventStreamEvent {
		m.JobKey, m.Timestamp = key, timestamppb.Now()
		return &managerpb.EventStreamEvent{LogIndex: 9, Event: &managerpb.EventStreamEvent_JobInfo{JobInfo: m}}
	}
	cases := []struct {
		name string
		ev   *managerpb.EventStreamEvent
		want string
	}{
		{"node_running", &managerpb.EventStreamEvent{LogIndex: 3, Event: &managerpb.EventStreamEvent_NodeRunning{NodeRunning: &managerpb.NodeRunning{
			NodeMetadata: nodeMD, RunningNodeMetadata: running, Instances: instances}}},
			"#3     node_running            node=n1 address=10.0.0.5 jobs=primary@n1 tags=pool=a"},
		{"job_active", &managerpb.EventStreamEvent{LogIndex: 3, Event: &managerpb.EventStreamEvent_JobActive{JobActive: &managerpb.JobActive{JobWithHistory: jobWH}}},
			"#3     job_active              job=j1 state=active last: running role=primary node=n1 ports=api: 10.0.0.5:19000->9000/tcp 19001->9001/any; web: 127.0.0.1:18080->8080/tcp 127.0.0.1:18081->5000/udp"},
		{"initial_data_complete", &managerpb.EventStreamEvent{LogIndex: 3, Event: &managerpb.EventStreamEvent_InitialDataComplete{
			InitialDataComplete: &managerpb.InitialDataComplete{Health: []*managerpb.ProviderHealth{{Health: &managerpb.ProviderHealth_Aws{
				Aws: &managerpb.AwsHealth{RegionHealth: []*managerpb.AwsRegionHealth{{Region: "eu-west-1", Health: managerpb.Health_UNSTABLE}}}}}}}}},
			"#3     initial_data_complete   snapshot complete aws eu-west-1=unstable"},
		{"job_updated", &managerpb.EventStreamEvent{LogIndex: 4, Event: &managerpb.EventStreamEvent_JobUpdated{JobUpdated: &managerpb.JobUpdated{JobWithHistory: jobWH}}},
			"#4     job_updated             job=j1 state=active last: running role=primary node=n1 ports=api: 10.0.0.5:19000->9000/tcp 19001->9001/any; web: 127.0.0.1:18080->8080/tcp 127.0.0.1:18081->5000/udp"},
		{"job_deleted", &managerpb.EventStreamEvent{LogIndex: 5, Event: &managerpb.EventStreamEvent_JobDeleted{JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: "j1"}}}},
			"#5     job_deleted             job=j1"},
		{"job_pending", &managerpb.EventStreamEvent{LogIndex: 5, Event: &managerpb.EventStreamEvent_JobPending{JobPending: &managerpb.JobPending{
			JobWithHistory: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j2"}}}}}},
			"#5     job_pending             job=j2 state=pre"},
		{"node_starting", &managerpb.EventStreamEvent{LogIndex: 6, Event: &managerpb.EventStreamEvent_NodeStarting{NodeStarting: &managerpb.NodeStarting{NodeMetadata: nodeMD}}},
			"#6     node_starting           node=n1 tags=pool=a"},
		{"node_started", &managerpb.EventStreamEvent{LogIndex: 7, Event: &managerpb.EventStreamEvent_NodeStarted{NodeStarted: &managerpb.NodeStarted{NodeMetadata: nodeMD, RunningNodeMetadata: running}}},
			"#7     node_started            node=n1 address=10.0.0.5"},
		{"node_stopping", &managerpb.EventStreamEvent{LogIndex: 8, Event: &managerpb.EventStreamEvent_NodeStopping{NodeStopping: &managerpb.NodeStopping{
			NodeId: &commonpb.NodeId{NodeId: "n1"}, Reason: managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED}}},
			"#8     node_stopping           node=n1 reason=health_ping_time_exceeded"},
		{"node_stopped", &managerpb.EventStreamEvent{LogIndex: 8, Event: &managerpb.EventStreamEvent_NodeStopped{NodeStopped: &managerpb.NodeStopped{NodeId: &commonpb.NodeId{NodeId: "n1"}}}},
			"#8     node_stopped            node=n1"},
		{"physical_node_connected", &managerpb.EventStreamEvent{LogIndex: 8, Event: &managerpb.EventStreamEvent_PhysicalNodeConnected{PhysicalNodeConnected: &managerpb.PhysicalNodeConnected{
			Node: &managerpb.PhysicalNode{Id: "p1", IpAddress: "10.0.0.9"}}}},
			"#8     physical_node_connected node=p1 address=10.0.0.9"},
		{"service started", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ServiceStarted{
			ServiceStarted: &commonpb.JobInfoServiceStarted{ServiceName: "web"}}}),
			"#9     job_info                job=j1 role=primary service web started"},
		{"service restarting", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ServiceRestarting{
			ServiceRestarting: &commonpb.JobInfoServiceRestarting{ServiceName: "web"}}}),
			"#9     job_info                job=j1 role=primary service web restarting"},
		{"container event", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ContainerEvent{
			ContainerEvent: &commonpb.JobInfoContainerEvent{ServiceName: "web", Text: "exited with status 1"}}}),
			"#9     job_info                job=j1 role=primary [web] exited with status 1"},
		{"compose", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ComposeMessage{
			ComposeMessage: &commonpb.JobInfoComposeMessage{Stage: commonpb.JobInfoComposeMessage_START, Text: "starting web"}}}),
			"#9     job_info                job=j1 role=primary start: starting web"},
		{"stream_reset", &managerpb.EventStreamEvent{LogIndex: 20, Event: &managerpb.EventStreamEvent_StreamReset{StreamReset: &managerpb.StreamReset{
			RequestedIndex: 2, FirstRetainedIndex: 10, HeadIndex: 20, Reason: "compacted"}}},
			`#20    stream_reset            requested=2 retained=10..20 reason="compacted": a fresh snapshot follows`},
		{"unknown", &managerpb.EventStreamEvent{LogIndex: 21},
			"#21    unknown                 (an event this norsk-ctl does not know; use --json)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ctlEventLine(tc.ev); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestCtl_Events follows the stream until interrupted, across a broken
// stream, and checks the lines and the resume hint.
func TestCtl_Events(t *testing.T) {
	fake, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "n1")
	mustRun(t, addr, "job", "create", "-f", exampleJob)

	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() { doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events", "--window", "2h") }()

	out.waitFor(t, "initial_data_complete")
	mustRun(t, addr, "job", "start", "hello-http", "--node", "n1")
	out.waitFor(t, "last: running role=primary node=n1")
	fake.BreakStreams(status.Error(codes.Unavailable, "failover"))
	mustRun(t, addr, "job", "delete", "hello-http")
	out.waitFor(t, "job_deleted")
	cancel()
	r := <-doneCh

	if r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	wantRe := []string{
		`^\d\d:\d\d:\d\d  #3     node_running            node=n1 address=127\.0\.0\.1$`,
		`^\d\d:\d\d:\d\d  #3     job_active              job=hello-http state=active last: created$`,
		`^\d\d:\d\d:\d\d  #3     initial_data_complete   snapshot complete$`,
		`^\d\d:\d\d:\d\d  #4     job_updated             job=hello-http state=active last: running role=primary node=n1$`,
		`^\d\d:\d\d:\d\d  #5     job_deleted             job=hello-http$`,
	}
	if len(lines) != len(wantRe) {
		t.Fatalf("events printed %d lines, want %d:\n%s", len(lines), len(wantRe), r.stdout)
	}
	for i, re := range wantRe {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want match of %s", i, lines[i], re)
		}
	}
	if !strings.Contains(r.stderr, "event stream broken; reconnecting") ||
		!strings.Contains(r.stderr, "stopped after log index 5 (continue with: norsk-ctl events --resume-from 5)") {
		t.Errorf("stderr = %q", r.stderr)
	}
	reqs := fake.StreamRequests()
	if len(reqs) != 2 || reqs[0].GetPendingWindowS() != 7200 || reqs[1].GetResumeFromIndex() != 4 {
		t.Errorf("stream requests = %v", reqs)
	}
}

// TestCtl_EventsJSONResume prints JSON lines from a resume index.
func TestCtl_EventsJSONResume(t *testing.T) {
	fake, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "n1") // log indexes 1 and 2
	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() {
		doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events", "--resume-from", "1", "--json")
	}()
	got := out.waitFor(t, "\n")
	cancel()
	r := <-doneCh
	if r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
	first := strings.SplitN(got, "\n", 2)[0]
	if !strings.Contains(first, `"nodeStarted"`) || !strings.Contains(first, `"logIndex":"2"`) {
		t.Errorf("first line %q, want node_started at index 2", first)
	}
	if reqs := fake.StreamRequests(); len(reqs) != 1 || reqs[0].GetResumeFromIndex() != 1 {
		t.Errorf("stream requests = %v", reqs)
	}
}
