package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestValidatePool_Provisioner(t *testing.T) {
	it := func(name string, capacity uint32) *managerpb.TierInstanceType {
		return &managerpb.TierInstanceType{InstanceType: name, Capacity: capacity}
	}
	aws := func(f func(a *managerpb.AwsTierProvisioner)) *managerpb.PoolTier {
		a := &managerpb.AwsTierProvisioner{Region: "eu-west-2", AvailabilityZones: []string{"eu-west-2a", "eu-west-2b"},
			Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}}, InstanceTypes: []*managerpb.TierInstanceType{it("c6i.2xlarge", 8)}}
		if f != nil {
			f(a)
		}
		return &managerpb.PoolTier{Name: "cloud", Provisioner: &managerpb.PoolTier_Aws{Aws: a}, MaxNodes: 4}
	}
	oci := func(f func(o *managerpb.OciTierProvisioner)) *managerpb.PoolTier {
		o := &managerpb.OciTierProvisioner{AvailabilityDomains: []string{"Uocm:EU-FRANKFURT-1-AD-1"}, Shape: it("VM.Standard.E4.Flex", 4), Subnet: "ocid1.subnet.oc1..x"}
		if f != nil {
			f(o)
		}
		return &managerpb.PoolTier{Name: "oci", Provisioner: &managerpb.PoolTier_Oci{Oci: o}}
	}
	mock := func(offering *managerpb.TierInstanceType, linger uint32) *managerpb.PoolTier {
		return &managerpb.PoolTier{Name: "mock", LingerSeconds: linger, Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: offering}}}
	}
	cases := []struct {
		name  string
		tier  *managerpb.PoolTier
		field string // "" = valid
	}{
		{"aws", aws(nil), ""},
		{"aws without zones", aws(func(a *managerpb.AwsTierProvisioner) { a.AvailabilityZones = nil }), ""},
		{"oci", oci(nil), ""},
		{"mock", mock(it("", 10), 60), ""},
		{"linger without provisioner", &managerpb.PoolTier{Name: "a", LingerSeconds: 60}, "pool.tiers[0].linger_seconds"},
		{"linger over a week", mock(it("", 1), maxLingerSeconds+1), "pool.tiers[0].linger_seconds"},
		{"aws bad region", aws(func(a *managerpb.AwsTierProvisioner) { a.Region = "eu west" }), "pool.tiers[0].aws.region"},
		{"aws no template", aws(func(a *managerpb.AwsTierProvisioner) { a.Template = nil }), "pool.tiers[0].aws.template"},
		{"aws no instance types", aws(func(a *managerpb.AwsTierProvisioner) { a.InstanceTypes = nil }), "pool.tiers[0].aws.instance_types"},
		{"aws zero capacity", aws(func(a *managerpb.AwsTierProvisioner) { a.InstanceTypes[0].Capacity = 0 }), "pool.tiers[0].aws.instance_types[0].capacity"},
		{"aws bad type", aws(func(a *managerpb.AwsTierProvisioner) { a.InstanceTypes[0].InstanceType = "c6i 2xl" }), "pool.tiers[0].aws.instance_types[0].instance_type"},
		{"aws duplicate type", aws(func(a *managerpb.AwsTierProvisioner) { a.InstanceTypes = append(a.InstanceTypes, it("c6i.2xlarge", 8)) }), "pool.tiers[0].aws.instance_types[1].instance_type"},
		{"aws duplicate zone", aws(func(a *managerpb.AwsTierProvisioner) { a.AvailabilityZones = []string{"eu-west-2a", "eu-west-2a"} }), "pool.tiers[0].aws.availability_zones[1]"},
		{"aws bad zone", aws(func(a *managerpb.AwsTierProvisioner) { a.AvailabilityZones = []string{"eu/west"} }), "pool.tiers[0].aws.availability_zones[0]"},
		{"aws zone of another region", aws(func(a *managerpb.AwsTierProvisioner) { a.AvailabilityZones = []string{"eu-west-2a", "us-east-1a"} }), "pool.tiers[0].aws.availability_zones[1]"},
		{"aws local zone of the region", aws(func(a *managerpb.AwsTierProvisioner) { a.AvailabilityZones = []string{"eu-west-2-lon-1a"} }), ""},
		{"aws too many tags with the selector", func() *managerpb.PoolTier {
			tr := aws(func(a *managerpb.AwsTierProvisioner) {
				a.Tags = map[string]string{}
				for i := range 30 {
					a.Tags[fmt.Sprintf("t%02d", i)] = "v"
				}
			})
			tr.NodeSelector = map[string]string{}
			for i := range 20 {
				tr.NodeSelector[fmt.Sprintf("s%02d", i)] = "v"
			}
			return tr
		}(), "pool.tiers[0].aws.tags"},
		{"aws empty security group", aws(func(a *managerpb.AwsTierProvisioner) { a.ExtraSecurityGroups = []string{""} }), "pool.tiers[0].aws.extra_security_groups[0]"},
		{"oci no domains", oci(func(o *managerpb.OciTierProvisioner) { o.AvailabilityDomains = nil }), "pool.tiers[0].oci.availability_domains"},
		{"oci no shape", oci(func(o *managerpb.OciTierProvisioner) { o.Shape = nil }), "pool.tiers[0].oci.shape"},
		{"oci bad architecture", oci(func(o *managerpb.OciTierProvisioner) { o.Architecture = "sparc" }), "pool.tiers[0].oci.architecture"},
		{"mock no offering", mock(nil, 0), "pool.tiers[0].mock.offering"},
		{"mock capacity too big", mock(it("", maxTierCapacity+1), 0), "pool.tiers[0].mock.offering.capacity"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{tc.tier}}
			before := proto.Clone(in)
			out, err := validatePool(in)
			if !proto.Equal(before, in) {
				t.Fatal("validatePool modified its input")
			}
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if want := max(tc.tier.GetLingerSeconds(), DefaultLingerSeconds); tc.tier.GetLingerSeconds() == 0 && out.GetTiers()[0].GetLingerSeconds() != want {
					t.Fatalf("linger stored %d, want the default %d", out.GetTiers()[0].GetLingerSeconds(), want)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestValidatePool_TierStatusIgnored: the output field is never stored.
func TestValidatePool_TierStatusIgnored(t *testing.T) {
	out, err := validatePool(&managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{{Name: "a"}},
		TierStatus: []*managerpb.PoolTierStatus{{Tier: "a", NodesRunning: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.GetTierStatus()) != 0 {
		t.Fatalf("tier_status stored: %v", out.GetTierStatus())
	}
}

// TestValidatePool_ElasticExample: the README's example of a tier with a
// provisioner is a valid pool.
func TestValidatePool_ElasticExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "pools", "elastic.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p managerpb.Pool
	if err := protojson.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	out, err := validatePool(&p)
	if err != nil {
		t.Fatalf("examples/pools/elastic.json: %v", err)
	}
	if got := out.GetTiers()[1].GetAws().GetInstanceTypes()[0].GetCapacity(); got != 8 {
		t.Fatalf("first instance type capacity = %d, want 8", got)
	}
}

// TestValidateAwsNode_Zone: CreateAwsNode's availability zone is a zone
// name or empty.
func TestValidateAwsNode_Zone(t *testing.T) {
	req := func(zone string) *managerpb.CreateAwsNodeRequest {
		return &managerpb.CreateAwsNodeRequest{Region: "eu-west-2", AvailabilityZone: zone,
			Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "w"}}}
	}
	for _, ok := range []string{"", "eu-west-2a"} {
		if err := validateAwsNode(req(ok)); err != nil {
			t.Errorf("zone %q: %v", ok, err)
		}
	}
	if err := validateAwsNode(req("eu west")); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "availability_zone:") {
		t.Errorf("zone with a space: %v, want InvalidArgument naming availability_zone", err)
	}
}
