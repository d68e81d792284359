package provisioner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// groupFailed is the record of node id of tier aws in pool cloud whose
// launch found groups missing (the text is providers.SecurityGroupsMissingError's).
func groupFailed(id, offering, lastError string, at time.Time) Node {
	reason := managerpb.NodeStopping_CREATE_FAILED
	n, _ := NodeOf(&internalpb.NodeRecord{NodeId: id, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, StopReason: &reason,
		Metadata:    &commonpb.NodeMetadata{CreatedAt: timestamppb.New(at)},
		Provisioned: &internalpb.Provisioned{Pool: "cloud", Tier: "aws", Offering: offering, Capacity: 4},
		Cloud:       &internalpb.CloudNode{LastError: lastError}})
	return n
}

func TestMissingGroupsOf(t *testing.T) {
	cases := []struct {
		text   string
		region string
		groups []string
		ok     bool
	}{
		{`providers: security group not found: "typo" in region eu-west-2`, "eu-west-2", []string{"typo"}, true},
		{`providers: security group not found: "a", "b \"c\"" in region us-east-1: operation error EC2: RunInstances, api error InvalidGroup.NotFound: The security group 'sg-1' does not exist`,
			"us-east-1", []string{"a", `b "c"`}, true},
		{`providers: no capacity: InsufficientInstanceCapacity`, "", nil, false},
		{`providers: security group not found: typo in region eu-west-2`, "", nil, false},
		{`providers: security group not found: "typo"`, "", nil, false},
	}
	for _, tc := range cases {
		region, groups, ok := MissingGroupsOf(tc.text)
		if region != tc.region || !slices.Equal(groups, tc.groups) || ok != tc.ok {
			t.Errorf("MissingGroupsOf(%q) = %q %q %v; want %q %q %v", tc.text, region, groups, ok, tc.region, tc.groups, tc.ok)
		}
	}
}

// TestPlan_MissingSecurityGroup: a job whose extra security group is
// missing in the tier's region gets no node and a reason naming the group
// and the region; the tier (and the same offering) goes on serving the
// other jobs at once: nothing is backed off, also when a launch found the
// group missing (a node record), until GroupRetry ends.
func TestPlan_MissingSecurityGroup(t *testing.T) {
	cloud := &managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{awsTier("aws", []string{"eu-west-2a"}, itype("c6i.large", 4))}}
	guarded := awsTier("aws", []string{"eu-west-2a"}, itype("c6i.large", 4))
	guarded.GetAws().ExtraSecurityGroups = []string{"tier-sg"}
	tierGroup := &managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{guarded}}
	jobs := []Waiting{{Key: "bad/primary", Pool: "cloud", Capacity: 1, SecurityGroups: []string{"srt", "typo"}},
		{Key: "good/primary", Pool: "cloud", Capacity: 1}, {Key: "srt/primary", Pool: "cloud", Capacity: 1, SecurityGroups: []string{"srt"}}}
	lookedUp := []MissingGroup{{Region: "eu-west-2", Group: "typo", At: t0.Add(-time.Second)}}
	failedLaunch := groupFailed("cloud-aws-1", "c6i.large@eu-west-2a",
		`providers: security group not found: "typo" in region eu-west-2: api error InvalidGroup.NotFound: The security group 'sg-1' does not exist`, t0.Add(-time.Second))
	cases := []struct {
		name    string
		in      Input
		want    []string
		reasons map[string]string
	}{
		{name: "looked up missing: the job waits, the others get a node",
			in:      Input{Now: t0, Pools: pools(cloud), Waiting: jobs, MissingGroups: lookedUp},
			want:    []string{"cloud-aws-1(c6i.large@eu-west-2a):good/primary,srt/primary sg=srt"},
			reasons: map[string]string{"bad/primary": `tier aws: security group "typo" (the job's extra_security_groups) does not exist in region eu-west-2`}},
		{name: "a launch found it missing: the offering is not backed off",
			in:      Input{Now: t0, Pools: pools(cloud), Waiting: jobs, Nodes: []Node{failedLaunch}},
			want:    []string{"cloud-aws-2(c6i.large@eu-west-2a):good/primary,srt/primary sg=srt"},
			reasons: map[string]string{"bad/primary": `the launch of node cloud-aws-1 found it missing`}},
		{name: "after GroupRetry the job is tried again",
			in:   Input{Now: t0.Add(GroupRetry), Pools: pools(cloud), Waiting: jobs[:1], Nodes: []Node{failedLaunch}, MissingGroups: lookedUp},
			want: []string{"cloud-aws-2(c6i.large@eu-west-2a):bad/primary sg=srt,typo"}},
		{name: "another region's missing group does not count",
			in:   Input{Now: t0, Pools: pools(cloud), Waiting: jobs[:1], MissingGroups: []MissingGroup{{Region: "us-east-1", Group: "typo", At: t0}}},
			want: []string{"cloud-aws-1(c6i.large@eu-west-2a):bad/primary sg=srt,typo"}},
		{name: "the tier's own group missing: every job waits, naming the tier",
			in: Input{Now: t0, Pools: pools(tierGroup), Waiting: jobs[1:2],
				MissingGroups: []MissingGroup{{Region: "eu-west-2", Group: "tier-sg", At: t0}}},
			reasons: map[string]string{"good/primary": `security group "tier-sg" (the tier's extra_security_groups) does not exist in region eu-west-2`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(tc.in)
			if got := creates(d); !slices.Equal(got, tc.want) {
				t.Errorf("creates = %q\nwant      %q", got, tc.want)
			}
			for k, want := range tc.reasons {
				if got := d.Unserved[k]; !strings.Contains(got, want) {
					t.Errorf("reason of %s = %q\nwant it to contain %q", k, got, want)
				}
			}
			if len(d.Unserved) != len(tc.reasons) {
				t.Errorf("unserved = %v; want only %v", d.Unserved, tc.reasons)
			}
			if b := Backoffs(tc.in.Nodes, tc.in.Now); len(b) != 0 {
				t.Errorf("backoffs = %+v; want none", b)
			}
		})
	}
}

// TestBackoffs_MissingGroupIsNotTheOfferings: a create that failed for a
// missing security group backs nothing off; any other failed create of
// the same offering still does.
func TestBackoffs_MissingGroupIsNotTheOfferings(t *testing.T) {
	n := groupFailed("cloud-aws-1", "c6i.large@eu-west-2a", `providers: security group not found: "typo" in region eu-west-2`, t0)
	if n.Region != "eu-west-2" || !slices.Equal(n.MissingGroups, []string{"typo"}) || !n.CreateFailed {
		t.Fatalf("NodeOf = %+v", n)
	}
	if b := Backoffs([]Node{n}, t0.Add(time.Second)); len(b) != 0 {
		t.Fatalf("backoffs = %+v; want none", b)
	}
	other := groupFailed("cloud-aws-2", "c6i.large@eu-west-2a", `providers: request rejected: InvalidLaunchTemplateName.NotFoundException`, t0)
	if b := Backoffs([]Node{n, other}, t0.Add(time.Second)); len(b) != 1 || b[0].Failures != 1 {
		t.Fatalf("backoffs = %+v; want one, of one failure", b)
	}
}
