package format_test

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestNodeOf(t *testing.T) {
	cases := []struct {
		name string
		md   *commonpb.NodeMetadata
		want string
	}{
		{"id", &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n1"}}, "n1"},
		{"no id", &commonpb.NodeMetadata{Tags: map[string]string{"a": "1"}}, "-"},
		{"empty id", &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{}}, "-"},
		{"nil", nil, "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.NodeOf(tc.md); got != tc.want {
				t.Errorf("NodeOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeAddress(t *testing.T) {
	cases := []struct {
		name string
		r    *commonpb.RunningNodeMetadata
		want string
	}{
		{"private ip first", &commonpb.RunningNodeMetadata{PrivateIpAddress: "10.0.0.5", PublicIpAddress: "203.0.113.9",
			PrivateDnsName: "ip-10-0-0-5.internal", PublicDnsName: "node.example"}, "10.0.0.5"},
		{"then public ip", &commonpb.RunningNodeMetadata{PublicIpAddress: "203.0.113.9", PrivateDnsName: "ip-10-0-0-5.internal"}, "203.0.113.9"},
		{"then private dns", &commonpb.RunningNodeMetadata{PrivateDnsName: "ip-10-0-0-5.internal", PublicDnsName: "node.example"}, "ip-10-0-0-5.internal"},
		{"then public dns", &commonpb.RunningNodeMetadata{PublicDnsName: "node.example"}, "node.example"},
		{"none", &commonpb.RunningNodeMetadata{}, "-"},
		{"nil", nil, "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.NodeAddress(tc.r); got != tc.want {
				t.Errorf("NodeAddress = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInstances(t *testing.T) {
	instance := func(job, role, node string) *managerpb.RunningJob {
		return &managerpb.RunningJob{
			JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: job}, Role: role},
			NodeId: &commonpb.NodeId{NodeId: node},
		}
	}
	cases := []struct {
		name           string
		instances      []*managerpb.RunningJob
		wantInstances  string // the jobs on a node: job/role
		wantPlacements string // where a job runs: role@node
	}{
		{"none", nil, "-", "-"},
		{"one", []*managerpb.RunningJob{instance("j1", "primary", "n1")}, "j1/primary", "primary@n1"},
		{"in order given", []*managerpb.RunningJob{instance("j2", "primary", "n1"), instance("j1", "backup", "n1")},
			"j2/primary,j1/backup", "primary@n1,backup@n1"},
		{"no node", []*managerpb.RunningJob{{JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "j1"}, Role: "primary"}}},
			"j1/primary", "primary@"},
		{"no job id", []*managerpb.RunningJob{{JobKey: &commonpb.ActiveJobKey{Role: "primary"}, NodeId: &commonpb.NodeId{NodeId: "n1"}}},
			"/primary", "primary@n1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Instances(tc.instances); got != tc.wantInstances {
				t.Errorf("Instances = %q, want %q", got, tc.wantInstances)
			}
			if got := format.Placements(tc.instances); got != tc.wantPlacements {
				t.Errorf("Placements = %q, want %q", got, tc.wantPlacements)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 8: "8", 3.5: "3.5", 0.25: "0.25", 0.1 + 0.2: "0.3", 1.0 / 3: "0.33", -0.5: "-0.5"} {
		if got := format.Units(v); got != want {
			t.Errorf("Units(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestCapacity(t *testing.T) {
	cases := []struct {
		name string
		n    *managerpb.NodeInfo
		want string
	}{
		{"allocated of total", &managerpb.NodeInfo{Resources: &commonpb.NodeResources{Capacity: 8}, AllocatedCapacity: 3.5}, "3.5/8"},
		{"nothing allocated", &managerpb.NodeInfo{Resources: &commonpb.NodeResources{Capacity: 4}}, "0/4"},
		{"overcommitted", &managerpb.NodeInfo{Resources: &commonpb.NodeResources{Capacity: 2}, AllocatedCapacity: 3}, "3/2"},
		{"never reported", &managerpb.NodeInfo{AllocatedCapacity: 1.5}, "1.5/?"},
		{"nil", nil, "0/?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Capacity(tc.n); got != tc.want {
				t.Errorf("Capacity = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestZone(t *testing.T) {
	if format.Zone("") != "-" || format.Zone("eu-west-2a") != "eu-west-2a" {
		t.Fatal("Zone renders wrongly")
	}
}
