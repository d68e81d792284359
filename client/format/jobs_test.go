package format_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestJobState(t *testing.T) {
	cases := []struct {
		s    managerpb.Job_JobState
		want string
	}{
		{managerpb.Job_PRE, "pre"},
		{managerpb.Job_ACTIVE, "active"},
		{managerpb.Job_POST, "post"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := format.JobState(tc.s); got != tc.want {
				t.Errorf("JobState(%v) = %q, want %q", tc.s, got, tc.want)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	cases := []struct {
		p    commonpb.ProtocolFamily
		want string
	}{
		{commonpb.ProtocolFamily_ANY, "any"},
		{commonpb.ProtocolFamily_UDP, "udp"},
		{commonpb.ProtocolFamily_TCP, "tcp"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := format.Protocol(tc.p); got != tc.want {
				t.Errorf("Protocol(%v) = %q, want %q", tc.p, got, tc.want)
			}
		})
	}
}

func TestPortMapping(t *testing.T) {
	cases := []struct {
		name string
		pm   *commonpb.PortMapping
		want string
	}{
		{"specific with host address", &commonpb.PortMapping{ContainerPort: 8080, Protocol: commonpb.ProtocolFamily_TCP, HostAddress: "127.0.0.1",
			HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: 18080}}}, "127.0.0.1:18080->8080/tcp"},
		{"range", &commonpb.PortMapping{ContainerPort: 53, Protocol: commonpb.ProtocolFamily_UDP,
			HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: 5000, MaxPort: 5010}}}, "5000-5010->53/udp"},
		{"ephemeral", &commonpb.PortMapping{ContainerPort: 9000,
			HostPort: &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}}}, "*->9000/any"},
		{"no host port", &commonpb.PortMapping{ContainerPort: 80, Protocol: commonpb.ProtocolFamily_TCP, HostAddress: "0.0.0.0"}, "0.0.0.0:*->80/tcp"},
		{"nil", nil, "*->0/any"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.PortMapping(tc.pm); got != tc.want {
				t.Errorf("PortMapping = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestService(t *testing.T) {
	cases := []struct {
		name string
		s    *commonpb.Service
		want string
	}{
		{"every field", &commonpb.Service{
			Name:      "web",
			Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: "nginx:1"}}},
			Command:   `sh -c "serve"`,
			Restart:   commonpb.Service_ON_FAILURE, RestartCount: 3, RestartPeriod: 60,
			Parameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{
				{ContainerPort: 8080, Protocol: commonpb.ProtocolFamily_TCP, HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: 18080}}},
				{ContainerPort: 9000},
			}},
			DependsOn: []string{"db", "cache"},
		}, `web  image=nginx:1  command="sh -c \"serve\""  restart=on_failure (3 in 60s)  ports=18080->8080/tcp,*->9000/any  depends-on=db,cache`},
		{"name only", &commonpb.Service{Name: "db"}, "db  restart=never"},
		{"never ignores count", &commonpb.Service{Name: "db", RestartCount: 3, RestartPeriod: 60}, "db  restart=never"},
		{"always without count", &commonpb.Service{Name: "db", Restart: commonpb.Service_ALWAYS}, "db  restart=always"},
		{"nil", nil, "  restart=never"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Service(tc.s); got != tc.want {
				t.Errorf("Service =\n%q, want\n%q", got, tc.want)
			}
		})
	}
}

func TestPublished(t *testing.T) {
	cases := []struct {
		name      string
		url       string
		published uint32
		want      string
	}{
		{"url with scheme and port", "tcp://127.0.0.1:18080", 18080, "127.0.0.1:18080"},
		{"bare host", "10.0.0.5", 19000, "10.0.0.5:19000"},
		{"no url", "", 19001, "19001"},
		{"trailing slash", "http://host.example/", 8080, "host.example:8080"},
		{"ipv6 with port", "tcp://[::1]:18080", 18080, "[::1]:18080"},
		{"bare ipv6", "::1", 18080, "[::1]:18080"},
		{"bracketed ipv6", "[::1]", 18080, "[::1]:18080"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &commonpb.ResolvedPortMapping{Url: tc.url, Published: tc.published}
			if got := format.Published(p); got != tc.want {
				t.Errorf("Published(%q, %d) = %q, want %q", tc.url, tc.published, got, tc.want)
			}
		})
	}
}

func TestResolvedPorts(t *testing.T) {
	cases := []struct {
		name      string
		byService map[string]*commonpb.ResolvedPortMappings
		want      string
	}{
		{"none", nil, ""},
		{"services in name order", map[string]*commonpb.ResolvedPortMappings{
			"web": {Mappings: []*commonpb.ResolvedPortMapping{
				{Url: "tcp://127.0.0.1:18080", Target: 8080, Published: 18080, Protocol: commonpb.ProtocolFamily_TCP},
				{Url: "udp://127.0.0.1:18081", Target: 5000, Published: 18081, Protocol: commonpb.ProtocolFamily_UDP},
			}},
			"api": {Mappings: []*commonpb.ResolvedPortMapping{{Target: 9001, Published: 19001}}},
		}, "api: 19001->9001/any; web: 127.0.0.1:18080->8080/tcp 127.0.0.1:18081->5000/udp"},
		{"service without ports", map[string]*commonpb.ResolvedPortMappings{"worker": {}}, "worker: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.ResolvedPorts(tc.byService); got != tc.want {
				t.Errorf("ResolvedPorts = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHistoryEntry(t *testing.T) {
	ts := timestamppb.New(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC))
	md := &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n1"}}
	cases := []struct {
		name   string
		h      *managerpb.JobHistoryEntry
		wantTS *timestamppb.Timestamp
		want   string
	}{
		{"created", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{
			JobCreated: &managerpb.JobHistoryJobCreated{Timestamp: ts}}}, ts, "created"},
		{"updated", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobUpdated{
			JobUpdated: &managerpb.JobHistoryJobUpdated{Timestamp: ts}}}, ts, "updated"},
		{"provisioned", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{
			JobProvisioned: &managerpb.JobHistoryJobProvisioned{Timestamp: ts, Role: "primary", NodeMetadata: md}}}, ts, "provisioned role=primary node=n1"},
		{"provisioned without node", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{
			JobProvisioned: &managerpb.JobHistoryJobProvisioned{Timestamp: ts, Role: "primary"}}}, ts, "provisioned role=primary node=-"},
		{"running", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobRunning{
			JobRunning: &managerpb.JobHistoryJobRunning{Timestamp: ts, Role: "primary", NodeMetadata: md}}}, ts, "running role=primary node=n1"},
		{"running with ports", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobRunning{
			JobRunning: &managerpb.JobHistoryJobRunning{Timestamp: ts, Role: "primary", NodeMetadata: md,
				ServicePortMappings: map[string]*commonpb.ResolvedPortMappings{"web": {Mappings: []*commonpb.ResolvedPortMapping{
					{Url: "tcp://127.0.0.1:18080", Target: 8080, Published: 18080, Protocol: commonpb.ProtocolFamily_TCP}}}}}}},
			ts, "running role=primary node=n1 ports=web: 127.0.0.1:18080->8080/tcp"},
		{"stopping", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{
			JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: ts, Role: "backup", NodeMetadata: md,
				Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED}}}, ts, "stopping role=backup node=n1 reason=user_requested"},
		{"stopped", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{
			JobStopped: &managerpb.JobHistoryJobStopped{Timestamp: ts, Role: "backup", NodeMetadata: md}}}, ts, "stopped role=backup node=n1"},
		{"completed", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCompleted{
			JobCompleted: &managerpb.JobHistoryJobCompleted{Timestamp: ts}}}, ts, "completed"},
		{"no timestamp", &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{
			JobCreated: &managerpb.JobHistoryJobCreated{}}}, nil, "created"},
		{"unknown", &managerpb.JobHistoryEntry{}, nil, "unknown history entry"},
		{"nil", nil, nil, "unknown history entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gotTS, got := format.HistoryEntry(tc.h)
			if gotTS != tc.wantTS || got != tc.want {
				t.Errorf("HistoryEntry = (%v, %q), want (%v, %q)", gotTS, got, tc.wantTS, tc.want)
			}
		})
	}
}
