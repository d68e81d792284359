package provisioner

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func mockTier(name string, capacity, maxNodes uint32) *managerpb.PoolTier {
	return &managerpb.PoolTier{Name: name, MaxNodes: maxNodes, Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{
		Offering: &managerpb.TierInstanceType{Capacity: capacity}}}}
}

func awsTier(name string, zones []string, types ...*managerpb.TierInstanceType) *managerpb.PoolTier {
	return &managerpb.PoolTier{Name: name, Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{
		Region: "eu-west-2", AvailabilityZones: zones, InstanceTypes: types}}}
}

func itype(name string, capacity uint32) *managerpb.TierInstanceType {
	return &managerpb.TierInstanceType{InstanceType: name, Capacity: capacity}
}

func pools(ps ...*managerpb.Pool) map[string]*managerpb.Pool {
	m := map[string]*managerpb.Pool{}
	for _, p := range ps {
		m[p.GetName()] = p
	}
	return m
}

func waiting(pool string, capacity float64, keys ...string) []Waiting {
	var out []Waiting
	for _, k := range keys {
		out = append(out, Waiting{Key: k, Pool: pool, Capacity: capacity})
	}
	return out
}

// creates renders the creates as "id(offering):job,job" for comparison.
func creates(d Decision) []string {
	var out []string
	for _, c := range d.Creates {
		s := fmt.Sprintf("%s(%s):%s", c.NodeID, c.Offering.Name(), strings.Join(c.ForJobs, ","))
		if len(c.SecurityGroups) > 0 {
			s += " sg=" + strings.Join(c.SecurityGroups, ",")
		}
		out = append(out, s)
	}
	return out
}

func TestPlan(t *testing.T) {
	fixed := &managerpb.PoolTier{Name: "onprem", NodeSelector: map[string]string{"site": "osl"}}
	live := &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{fixed, mockTier("cheap", 8, 2), mockTier("dear", 16, 0)}}
	cloud := &managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{
		awsTier("aws", []string{"eu-west-2a", "eu-west-2b"}, itype("c6i.large", 4), itype("c6i.2xlarge", 16))}}
	failedIn := func(n Node) Node {
		n.State, n.CapacityError, n.LastError = Stopped, true, "providers: no capacity: InsufficientInstanceCapacity"
		return n
	}
	cases := []struct {
		name     string
		in       Input
		want     []string
		coming   map[string]string
		unserved []string
	}{
		{name: "several waiting jobs share one node",
			in:   Input{Pools: pools(live), Waiting: waiting("live", 2, "a/primary", "b/primary", "c/primary")},
			want: []string{"live-cheap-1(mock@):a/primary,b/primary,c/primary"}},
		{name: "largest first, first fit",
			in:   Input{Pools: pools(live), Waiting: append(waiting("live", 3, "a/primary", "b/primary", "c/primary"), waiting("live", 5, "big/primary")...)},
			want: []string{"live-cheap-1(mock@):big/primary,a/primary", "live-cheap-2(mock@):b/primary,c/primary"}},
		{name: "max_nodes, then the next tier",
			in:   Input{Pools: pools(live), Waiting: waiting("live", 6, "a/p", "b/p", "c/p", "d/p")},
			want: []string{"live-cheap-1(mock@):a/p", "live-cheap-2(mock@):b/p", "live-dear-1(mock@):c/p,d/p"}},
		{name: "running and creating nodes count for max_nodes; stopped ones do not",
			in: Input{Pools: pools(live), Waiting: waiting("live", 6, "x/p", "y/p"), Nodes: []Node{
				{ID: "live-cheap-1", Pool: "live", Tier: "cheap", State: Running, Capacity: 8},
				{ID: "live-cheap-2", Pool: "live", Tier: "cheap", State: Creating, Capacity: 8, ForJobs: []string{"y/p"}},
				{ID: "live-cheap-3", Pool: "live", Tier: "cheap", State: Stopped, Capacity: 8}}},
			want: []string{"live-dear-1(mock@):x/p"}, coming: map[string]string{"y/p": "live-cheap-2"}},
		{name: "a node being created is room already coming",
			in: Input{Pools: pools(live), Waiting: waiting("live", 2, "a/p", "b/p"), Nodes: []Node{
				{ID: "live-cheap-4", Pool: "live", Tier: "cheap", State: Creating, Capacity: 8, ForJobs: []string{"a/p"}}}},
			coming: map[string]string{"a/p": "live-cheap-4", "b/p": "live-cheap-4"}},
		{name: "ids go on from the tier's highest",
			in: Input{Pools: pools(live), Waiting: waiting("live", 8, "a/p"), Nodes: []Node{
				{ID: "live-cheap-7", Pool: "live", Tier: "cheap", State: Stopped}}},
			want: []string{"live-cheap-8(mock@):a/p"}},
		{name: "an id taken by a node created by hand is skipped",
			in:   Input{Pools: pools(live), Waiting: waiting("live", 8, "a/p"), OtherIDs: []string{"live-cheap-1", "live-cheap-2"}},
			want: []string{"live-cheap-3(mock@):a/p"}},
		{name: "too big for every offering",
			in:       Input{Pools: pools(live), Waiting: waiting("live", 17, "huge/p")},
			unserved: []string{"huge/p"}},
		{name: "a pool without provisioners",
			in:       Input{Pools: pools(&managerpb.Pool{Name: "fixed", Tiers: []*managerpb.PoolTier{fixed}}), Waiting: waiting("fixed", 1, "a/p")},
			unserved: []string{"a/p"}},
		{name: "aws: the first type in the first zone",
			in:   Input{Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p")},
			want: []string{"cloud-aws-1(c6i.large@eu-west-2a):a/p"}},
		{name: "aws: a capacity error in one zone moves to the next",
			in: Input{Now: t0, Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p"), Nodes: []Node{
				failedIn(Node{ID: "cloud-aws-1", Pool: "cloud", Tier: "aws", Offering: "c6i.large@eu-west-2a", CreatedAt: t0.Add(-time.Minute)})}},
			want: []string{"cloud-aws-2(c6i.large@eu-west-2b):a/p"}},
		{name: "aws: both zones backed off: the next type",
			in: Input{Now: t0, Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p"), Nodes: []Node{
				failedIn(Node{ID: "cloud-aws-1", Pool: "cloud", Tier: "aws", Offering: "c6i.large@eu-west-2a", CreatedAt: t0.Add(-time.Minute)}),
				failedIn(Node{ID: "cloud-aws-2", Pool: "cloud", Tier: "aws", Offering: "c6i.large@eu-west-2b", CreatedAt: t0.Add(-time.Minute)})}},
			want: []string{"cloud-aws-3(c6i.2xlarge@eu-west-2a):a/p"}},
		{name: "aws: a backoff ends",
			in: Input{Now: t0, Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p"), Nodes: []Node{
				failedIn(Node{ID: "cloud-aws-1", Pool: "cloud", Tier: "aws", Offering: "c6i.large@eu-west-2a", CreatedAt: t0.Add(-BackoffBase)})}},
			want: []string{"cloud-aws-2(c6i.large@eu-west-2a):a/p"}},
		{name: "oci: out of host capacity in AD-1 moves to AD-2",
			in: Input{Now: t0, Pools: pools(&managerpb.Pool{Name: "oracle", Tiers: []*managerpb.PoolTier{{Name: "oci", Provisioner: &managerpb.PoolTier_Oci{
				Oci: &managerpb.OciTierProvisioner{AvailabilityDomains: []string{"AD-1", "AD-2"}, Shape: itype("VM.Standard.E4.Flex", 4)}}}}}),
				Waiting: waiting("oracle", 2, "a/p"), Nodes: []Node{{ID: "oracle-oci-1", Pool: "oracle", Tier: "oci", Offering: "VM.Standard.E4.Flex@AD-1",
					State: Stopped, CapacityError: true, CreatedAt: t0.Add(-time.Minute), LastError: "providers: no capacity: Out of host capacity."}},
				Health: func(p managerpb.NodeProvider, loc string) managerpb.Health {
					if p == managerpb.NodeProvider_NODE_PROVIDER_OCI && loc == "AD-1" {
						return managerpb.Health_UNSTABLE
					}
					return managerpb.Health_HEALTHY
				}},
			want: []string{"oracle-oci-2(VM.Standard.E4.Flex@AD-2):a/p"}},
		{name: "oci: an UNSTABLE domain comes after a healthy one",
			in: Input{Pools: pools(&managerpb.Pool{Name: "oracle", Tiers: []*managerpb.PoolTier{{Name: "oci", Provisioner: &managerpb.PoolTier_Oci{
				Oci: &managerpb.OciTierProvisioner{AvailabilityDomains: []string{"AD-1", "AD-2"}, Shape: itype("VM.Standard.E4.Flex", 4)}}}}}),
				Waiting: waiting("oracle", 2, "a/p"),
				Health: func(_ managerpb.NodeProvider, loc string) managerpb.Health {
					if loc == "AD-1" {
						return managerpb.Health_UNSTABLE
					}
					return managerpb.Health_HEALTHY
				}},
			want: []string{"oracle-oci-1(VM.Standard.E4.Flex@AD-2):a/p"}},
		{name: "aws: provider FAILED in the region",
			in: Input{Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p"),
				Health: func(managerpb.NodeProvider, string) managerpb.Health { return managerpb.Health_FAILED }},
			unserved: []string{"a/p"}},
		{name: "aws: UNSTABLE is still used when nothing else is left",
			in: Input{Pools: pools(cloud), Waiting: waiting("cloud", 2, "a/p"),
				Health: func(managerpb.NodeProvider, string) managerpb.Health { return managerpb.Health_UNSTABLE }},
			want: []string{"cloud-aws-1(c6i.large@eu-west-2a):a/p"}},
		{name: "security groups: the new node carries its jobs' groups",
			in: Input{Pools: pools(cloud), Waiting: []Waiting{{Key: "a/p", Pool: "cloud", Capacity: 1, SecurityGroups: []string{"sg-srt"}},
				{Key: "b/p", Pool: "cloud", Capacity: 1, SecurityGroups: []string{"sg-ingest"}}}},
			want: []string{"cloud-aws-1(c6i.large@eu-west-2a):a/p,b/p sg=sg-ingest,sg-srt"}},
		{name: "security groups: a node being created without them does not take the job",
			in: Input{Pools: pools(cloud), Waiting: []Waiting{{Key: "a/p", Pool: "cloud", Capacity: 1, SecurityGroups: []string{"sg-srt"}}},
				Nodes: []Node{{ID: "cloud-aws-1", Pool: "cloud", Tier: "aws", State: Creating, Capacity: 4}}},
			want: []string{"cloud-aws-2(c6i.large@eu-west-2a):a/p sg=sg-srt"}},
		{name: "security groups: never on a mock node",
			in:       Input{Pools: pools(live), Waiting: []Waiting{{Key: "a/p", Pool: "live", Capacity: 1, SecurityGroups: []string{"sg-srt"}}}},
			unserved: []string{"a/p"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(tc.in)
			if got := creates(d); !slices.Equal(got, tc.want) {
				t.Errorf("creates = %q\nwant      %q", got, tc.want)
			}
			if tc.coming == nil {
				tc.coming = map[string]string{}
			}
			if fmt.Sprint(d.Coming) != fmt.Sprint(tc.coming) {
				t.Errorf("coming = %v, want %v", d.Coming, tc.coming)
			}
			var unserved []string
			for k := range d.Unserved {
				unserved = append(unserved, k)
			}
			slices.Sort(unserved)
			if !slices.Equal(unserved, tc.unserved) {
				t.Errorf("unserved = %v (%v), want %v", unserved, d.Unserved, tc.unserved)
			}
			if again := creates(Plan(tc.in)); !slices.Equal(again, creates(d)) {
				t.Errorf("not deterministic: %q then %q", creates(d), again)
			}
		})
	}
}

// TestPlan_UnservedSaysWhy: the reason names each tier's obstacle.
func TestPlan_UnservedSaysWhy(t *testing.T) {
	p := &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{{Name: "onprem"}, mockTier("cheap", 8, 1)}}
	d := Plan(Input{Pools: pools(p), Waiting: waiting("live", 2, "a/p"), Nodes: []Node{{ID: "live-cheap-1", Pool: "live", Tier: "cheap", State: Running}}})
	want := "no node can be created for it in pool live: tier onprem: no provisioner; tier cheap: at max_nodes (1)"
	if got := d.Unserved["a/p"]; got != want {
		t.Fatalf("reason = %q\nwant     %q", got, want)
	}
}

func TestBackoffs(t *testing.T) {
	fail := func(id string, ago time.Duration) Node {
		return Node{ID: id, Pool: "p", Tier: "t", Offering: "x@z", State: Stopped, CapacityError: true, CreatedAt: t0.Add(-ago), LastError: "providers: no capacity: Out of host capacity"}
	}
	cases := []struct {
		name  string
		nodes []Node
		until time.Time // zero: none
	}{
		{"one failure: BackoffBase", []Node{fail("n1", time.Minute)}, t0.Add(BackoffBase - time.Minute)},
		{"two failures: doubled from the last", []Node{fail("n1", 3*time.Minute), fail("n2", time.Minute)}, t0.Add(2*BackoffBase - time.Minute)},
		{"expired", []Node{fail("n1", BackoffBase+time.Second)}, time.Time{}},
		{"out of the window", []Node{fail("n1", 2*time.Hour)}, time.Time{}},
		{"a stop that was no failed create", []Node{{ID: "n1", Pool: "p", Tier: "t", Offering: "x@z", State: Stopped, CreatedAt: t0}}, time.Time{}},
		{"a failed create that was not capacity: backed off too", []Node{{ID: "n1", Pool: "p", Tier: "t", Offering: "x@z", State: Stopped, CreateFailed: true,
			CreatedAt: t0.Add(-time.Minute), LastError: "providers: request rejected: InvalidLaunchTemplateName"}}, t0.Add(BackoffBase - time.Minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs := Backoffs(tc.nodes, t0)
			switch {
			case tc.until.IsZero() && len(bs) != 0:
				t.Fatalf("backoffs = %v, want none", bs)
			case !tc.until.IsZero() && (len(bs) != 1 || !bs[0].Until.Equal(tc.until)):
				t.Fatalf("backoffs = %v, want one until %s", bs, tc.until)
			case len(bs) == 1 && !strings.Contains(bs[0].Reason, tc.nodes[len(tc.nodes)-1].LastError):
				t.Fatalf("reason %q does not say the cloud's error", bs[0].Reason)
			}
		})
	}
}

func TestNodeID_Long(t *testing.T) {
	id := NodeID(strings.Repeat("p", 200), strings.Repeat("t", 64), 12)
	if len(id) > maxNodeIDLen {
		t.Fatalf("id %q is %d bytes", id, len(id))
	}
	if n := nodeNumber(id, strings.Repeat("p", 200), strings.Repeat("t", 64)); n != 12 {
		t.Fatalf("nodeNumber = %d, want 12", n)
	}
}

// TestNodeOf: the engine's mark makes a node the planner's; a started
// node whose worker has not reported its resources is still creating; a
// capacity failure is read from the cloud's last error.
func TestNodeOf(t *testing.T) {
	mark := &internalpb.Provisioned{Pool: "p", Tier: "t", Offering: "x@z", Capacity: 4}
	started := managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	stopped := managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	failed := managerpb.NodeStopping_CREATE_FAILED
	cases := []struct {
		name  string
		rec   *internalpb.NodeRecord
		ok    bool
		state State
		ice   bool
	}{
		{"created by hand", &internalpb.NodeRecord{NodeId: "n", State: started}, false, 0, false},
		{"starting", &internalpb.NodeRecord{NodeId: "n", Provisioned: mark}, true, Creating, false},
		{"started without resources", &internalpb.NodeRecord{NodeId: "n", Provisioned: mark, State: started}, true, Creating, false},
		{"started", &internalpb.NodeRecord{NodeId: "n", Provisioned: mark, State: started, Resources: &commonpb.NodeResources{Capacity: 4}}, true, Running, false},
		{"capacity failure", &internalpb.NodeRecord{NodeId: "n", Provisioned: mark, State: stopped, StopReason: &failed,
			Cloud: &internalpb.CloudNode{LastError: "providers: no capacity: InsufficientInstanceCapacity"}}, true, Stopped, true},
		{"other failure", &internalpb.NodeRecord{NodeId: "n", Provisioned: mark, State: stopped, StopReason: &failed,
			Cloud: &internalpb.CloudNode{LastError: "providers: request rejected: bad template"}}, true, Stopped, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := NodeOf(tc.rec)
			if ok != tc.ok || n.State != tc.state || n.CapacityError != tc.ice {
				t.Fatalf("NodeOf = %+v, %v; want ok %v state %d capacity error %v", n, ok, tc.ok, tc.state, tc.ice)
			}
		})
	}
}
