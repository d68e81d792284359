package format_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEventLine checks the one-line rendering of every event kind, which
// norsk-ctl events and norsk-manager --dev print.
func TestEventLine(t *testing.T) {
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
			"#3     node_running            node=n1 address=10.0.0.5 jobs=j1/primary tags=pool=a"},
		{"job_active", &managerpb.EventStreamEvent{LogIndex: 3, Event: &managerpb.EventStreamEvent_JobActive{JobActive: &managerpb.JobActive{JobWithHistory: jobWH}}},
			"#3     job_active              job=j1 state=active last: running role=primary node=n1 ports=api: 10.0.0.5:19000->9000/tcp 19001->9001/any; web: 127.0.0.1:18080->8080/tcp 127.0.0.1:18081->5000/udp"},
		{"initial_data_complete", &managerpb.EventStreamEvent{LogIndex: 3, Event: &managerpb.EventStreamEvent_InitialDataComplete{
			InitialDataComplete: &managerpb.InitialDataComplete{Health: []*managerpb.ProviderHealth{{Health: &managerpb.ProviderHealth_Aws{
				Aws: &managerpb.AwsHealth{RegionHealth: []*managerpb.AwsRegionHealth{{Region: "eu-west-1", Health: managerpb.Health_UNSTABLE}}}}}}}}},
			"#3     initial_data_complete   snapshot complete aws eu-west-1=unstable"},
		{"job_updated", &managerpb.EventStreamEvent{LogIndex: 4, Event: &managerpb.EventStreamEvent_JobUpdated{JobUpdated: &managerpb.JobUpdated{JobWithHistory: jobWH}}},
			"#4     job_updated             job=j1 state=active last: running role=primary node=n1 ports=api: 10.0.0.5:19000->9000/tcp 19001->9001/any; web: 127.0.0.1:18080->8080/tcp 127.0.0.1:18081->5000/udp"},
		{"node_alert", &managerpb.EventStreamEvent{LogIndex: 6, Event: &managerpb.EventStreamEvent_NodeAlert{NodeAlert: &managerpb.NodeAlert{
			NodeId: &commonpb.NodeId{NodeId: "n1"}, Kind: managerpb.NodeAlert_ORPHAN_FOUND, JobKey: key, Message: "unknown to the store"}}},
			"#6     node_alert              node=n1 kind=orphan_found job=j1 role=primary: unknown to the store"},
		{"node_alert cordoned", &managerpb.EventStreamEvent{LogIndex: 7, Event: &managerpb.EventStreamEvent_NodeAlert{NodeAlert: &managerpb.NodeAlert{
			NodeId: &commonpb.NodeId{NodeId: "n1"}, Kind: managerpb.NodeAlert_CORDONED, Message: "node n1 cordoned (by 127.0.0.1:5, reason: disk)"}}},
			"#7     node_alert              node=n1 kind=cordoned: node n1 cordoned (by 127.0.0.1:5, reason: disk)"},
		{"job_deleted", &managerpb.EventStreamEvent{LogIndex: 5, Event: &managerpb.EventStreamEvent_JobDeleted{JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: "j1"}}}},
			"#5     job_deleted             job=j1"},
		{"job_pending", &managerpb.EventStreamEvent{LogIndex: 5, Event: &managerpb.EventStreamEvent_JobPending{JobPending: &managerpb.JobPending{
			JobWithHistory: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j2"}}}}}},
			"#5     job_pending             job=j2 state=pre"},
		{"bundle_updated", &managerpb.EventStreamEvent{LogIndex: 6, Event: &managerpb.EventStreamEvent_BundleUpdated{BundleUpdated: &managerpb.BundleUpdated{
			Bundle: &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b1"}, Jobs: []*managerpb.BundleJobSpec{{JobName: "enc"}},
				State: managerpb.BundleState_BUNDLE_STATE_DELETING}}}},
			"#6     bundle_updated          bundle=b1 state=deleting specs=1"},
		{"bundle_deleted", &managerpb.EventStreamEvent{LogIndex: 6, Event: &managerpb.EventStreamEvent_BundleDeleted{BundleDeleted: &managerpb.BundleDeleted{
			BundleId: &managerpb.BundleId{BundleId: "b1"}}}},
			"#6     bundle_deleted          bundle=b1"},
		{"pool_updated", &managerpb.EventStreamEvent{LogIndex: 9, Event: &managerpb.EventStreamEvent_PoolUpdated{PoolUpdated: &managerpb.PoolUpdated{
			Pool: &managerpb.Pool{Name: "live", Version: 3, Tiers: []*managerpb.PoolTier{{Name: "onprem"}, {Name: "cloud"}}}}}},
			"#9     pool_updated            pool=live version=3 tiers=onprem>cloud"},
		{"pool_deleted", &managerpb.EventStreamEvent{LogIndex: 10, Event: &managerpb.EventStreamEvent_PoolDeleted{PoolDeleted: &managerpb.PoolDeleted{
			Name: &managerpb.PoolName{Name: "live"}}}},
			"#10    pool_deleted            pool=live"},
		{"job_placed", &managerpb.EventStreamEvent{LogIndex: 11, Event: &managerpb.EventStreamEvent_JobPlaced{JobPlaced: &managerpb.JobPlaced{
			JobId: &commonpb.JobId{JobId: "bd.1.web"}, Role: "backup", NodeId: &commonpb.NodeId{NodeId: "a2"}, Pool: "live", Tier: "onprem",
			DegradedDomains: []string{"zone"}}}},
			"#11    job_placed              job=bd.1.web role=backup node=a2 pool=live tier=onprem degraded=zone"},
		{"job_preempted", &managerpb.EventStreamEvent{LogIndex: 15, Event: &managerpb.EventStreamEvent_JobPreempted{JobPreempted: &managerpb.JobPreempted{
			JobId: &commonpb.JobId{JobId: "bulk"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: "n1"},
			ForJobId: &commonpb.JobId{JobId: "news"}, ForRole: "primary", Reason: "stopping 1 LOW priority instance on node n1 makes room"}}},
			"#15    job_preempted           job=bulk role=primary node=n1 for=news/primary: stopping 1 LOW priority instance on node n1 makes room"},
		{"placement_failed", &managerpb.EventStreamEvent{LogIndex: 12, Event: &managerpb.EventStreamEvent_PlacementFailed{PlacementFailed: &managerpb.PlacementFailed{
			JobId: &commonpb.JobId{JobId: "big"}, Role: "primary", Attempt: &managerpb.PlacementAttempt{
				Reason: "job big role primary fits no node: 2 nodes evaluated: capacity exhausted on 2 nodes (needs 9 units)"}}}},
			"#12    placement_failed        job=big role=primary: job big role primary fits no node: 2 nodes evaluated: capacity exhausted on 2 nodes (needs 9 units)"},
		{"placement_degraded", &managerpb.EventStreamEvent{LogIndex: 13, Event: &managerpb.EventStreamEvent_PlacementDegraded{PlacementDegraded: &managerpb.PlacementDegraded{
			JobId: &commonpb.JobId{JobId: "bd.1.web"}, Role: "backup", NodeId: &commonpb.NodeId{NodeId: "a2"}, Domains: []string{"zone"},
			State: managerpb.PlacementDegraded_FIX_AVAILABLE, Message: "node b1 has room"}}},
			"#13    placement_degraded      job=bd.1.web role=backup node=a2 state=fix_available domains=zone: node b1 has room"},
		{"placement_degraded resolved", &managerpb.EventStreamEvent{LogIndex: 14, Event: &managerpb.EventStreamEvent_PlacementDegraded{PlacementDegraded: &managerpb.PlacementDegraded{
			JobId: &commonpb.JobId{JobId: "bd.1.web"}, Role: "backup", NodeId: &commonpb.NodeId{NodeId: "a2"}, State: managerpb.PlacementDegraded_RESOLVED}}},
			"#14    placement_degraded      job=bd.1.web role=backup node=a2 state=resolved"},
		{"node_provisioning", &managerpb.EventStreamEvent{LogIndex: 15, Event: &managerpb.EventStreamEvent_NodeProvisioning{NodeProvisioning: &managerpb.NodeProvisioning{
			NodeId: &commonpb.NodeId{NodeId: "live-cloud-1"}, Pool: "live", Tier: "cloud", Offering: "c6i.large@eu-west-2a", ForJobs: []string{"a/primary", "b/primary"}}}},
			"#15    node_provisioning       node=live-cloud-1 pool=live tier=cloud offering=c6i.large@eu-west-2a for=a/primary,b/primary"},
		{"node_released", &managerpb.EventStreamEvent{LogIndex: 16, Event: &managerpb.EventStreamEvent_NodeReleased{NodeReleased: &managerpb.NodeReleased{
			NodeId: &commonpb.NodeId{NodeId: "live-cloud-1"}, Pool: "live", Tier: "cloud", IdleSeconds: 300}}},
			"#16    node_released           node=live-cloud-1 pool=live tier=cloud idle=300s"},
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
		{"container event without a service", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ContainerEvent{
			ContainerEvent: &commonpb.JobInfoContainerEvent{Text: "3 job info lines dropped"}}}),
			"#9     job_info                job=j1 role=primary 3 job info lines dropped"},
		{"compose", jobInfo(&commonpb.JobInfoMessage{Message: &commonpb.JobInfoMessage_ComposeMessage{
			ComposeMessage: &commonpb.JobInfoComposeMessage{Stage: commonpb.JobInfoComposeMessage_START, Text: "starting web"}}}),
			"#9     job_info                job=j1 role=primary start: starting web"},
		{"stream_reset", &managerpb.EventStreamEvent{LogIndex: 20, Event: &managerpb.EventStreamEvent_StreamReset{StreamReset: &managerpb.StreamReset{
			RequestedIndex: 2, FirstRetainedIndex: 10, HeadIndex: 20, Reason: "compacted"}}},
			`#20    stream_reset            requested=2 retained=10..20 reason="compacted": a fresh snapshot follows`},
		{"job_out_of_window", &managerpb.EventStreamEvent{LogIndex: 10, Event: &managerpb.EventStreamEvent_JobOutOfWindow{JobOutOfWindow: &managerpb.JobOutOfWindow{
			JobWithHistory: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j3"}, State: managerpb.Job_POST}}}}},
			"#10    job_out_of_window       job=j3 state=post"},
		{"provider_health_change", &managerpb.EventStreamEvent{LogIndex: 11, Event: &managerpb.EventStreamEvent_ProviderHealthChange{ProviderHealthChange: &managerpb.ProviderHealth{
			Health: &managerpb.ProviderHealth_Oci{Oci: &managerpb.OciHealth{RegionHealth: []*managerpb.OciRegionHealth{{AvailabilityDomain: "AD-1", Health: managerpb.Health_FAILED}}}}}}},
			"#11    provider_health_change  oci AD-1=failed"},
		{"empty initial_data_complete", &managerpb.EventStreamEvent{LogIndex: 12, Event: &managerpb.EventStreamEvent_InitialDataComplete{InitialDataComplete: &managerpb.InitialDataComplete{}}},
			"#12    initial_data_complete   snapshot complete"},
		{"empty provider_health_change", &managerpb.EventStreamEvent{LogIndex: 123456, Event: &managerpb.EventStreamEvent_ProviderHealthChange{ProviderHealthChange: &managerpb.ProviderHealth{}}},
			"#123456 provider_health_change"},
		{"nil", nil,
			"#0     unknown                 (an event kind this client does not know; see norsk-ctl events --json)"},
		{"unknown", &managerpb.EventStreamEvent{LogIndex: 21},
			"#21    unknown                 (an event kind this client does not know; see norsk-ctl events --json)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.EventLine(tc.ev); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestHealthList(t *testing.T) {
	aws := func(regions ...*managerpb.AwsRegionHealth) *managerpb.ProviderHealth {
		return &managerpb.ProviderHealth{Health: &managerpb.ProviderHealth_Aws{Aws: &managerpb.AwsHealth{RegionHealth: regions}}}
	}
	oci := func(domains ...*managerpb.OciRegionHealth) *managerpb.ProviderHealth {
		return &managerpb.ProviderHealth{Health: &managerpb.ProviderHealth_Oci{Oci: &managerpb.OciHealth{RegionHealth: domains}}}
	}
	cases := []struct {
		name string
		hs   []*managerpb.ProviderHealth
		want string
	}{
		{"none", nil, ""},
		{"no regions", []*managerpb.ProviderHealth{aws(), {}}, ""},
		{"aws regions in order", []*managerpb.ProviderHealth{aws(
			&managerpb.AwsRegionHealth{Region: "us-east-1", Health: managerpb.Health_HEALTHY},
			&managerpb.AwsRegionHealth{Region: "eu-west-1", Health: managerpb.Health_FAILED},
		)}, "aws us-east-1=healthy,eu-west-1=failed"},
		{"aws and oci", []*managerpb.ProviderHealth{
			aws(&managerpb.AwsRegionHealth{Region: "eu-west-1"}),
			oci(&managerpb.OciRegionHealth{AvailabilityDomain: "AD-1", Health: managerpb.Health_UNSTABLE}),
		}, "aws eu-west-1=healthy oci AD-1=unstable"},
		{"empty one skipped", []*managerpb.ProviderHealth{aws(), oci(&managerpb.OciRegionHealth{AvailabilityDomain: "AD-2"})}, "oci AD-2=healthy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.HealthList(tc.hs); got != tc.want {
				t.Errorf("HealthList = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDegradation(t *testing.T) {
	cases := []struct {
		domains []string
		state   managerpb.PlacementDegraded_State
		want    string
	}{
		{nil, managerpb.PlacementDegraded_PLACEMENT_DEGRADED_UNSPECIFIED, "-"},
		{[]string{"node", "zone"}, managerpb.PlacementDegraded_DEGRADED, "node,zone"},
		{[]string{"zone"}, managerpb.PlacementDegraded_FIX_AVAILABLE, "zone (fix available, not moved)"},
		{nil, managerpb.PlacementDegraded_RESOLVED, "resolved"},
	}
	for _, tc := range cases {
		if got := format.Degradation(tc.domains, tc.state); got != tc.want {
			t.Errorf("Degradation(%v, %v) = %q, want %q", tc.domains, tc.state, got, tc.want)
		}
	}
}
