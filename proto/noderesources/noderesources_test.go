package noderesources

import (
	"math"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestDefaultCapacity(t *testing.T) {
	for cores, want := range map[int]float64{0: 0.5, 1: 0.5, 2: 1, 3: 1.5, 8: 4, 64: 32} {
		if got := DefaultCapacity(cores); got != want {
			t.Errorf("DefaultCapacity(%d) = %v, want %v", cores, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		r     *commonpb.NodeResources
		field string // "" = valid
		key   string
	}{
		{"nil", nil, "", ""},
		{"minimal", &commonpb.NodeResources{Capacity: 0.5}, "", ""},
		{"full", &commonpb.NodeResources{Capacity: 8, GpuCapacity: 4, GpuModel: "nvidia-l4",
			Capabilities: map[string]string{"nvenc": "true", "av1": "hw"}, Zone: "Uocm:PHX-AD-1"}, "", ""},
		{"zero capacity", &commonpb.NodeResources{}, "capacity", ""},
		{"negative capacity", &commonpb.NodeResources{Capacity: -1}, "capacity", ""},
		{"NaN capacity", &commonpb.NodeResources{Capacity: math.NaN()}, "capacity", ""},
		{"infinite capacity", &commonpb.NodeResources{Capacity: math.Inf(1)}, "capacity", ""},
		{"huge capacity", &commonpb.NodeResources{Capacity: 2e6}, "capacity", ""},
		{"negative gpu", &commonpb.NodeResources{Capacity: 1, GpuCapacity: -0.5}, "gpu_capacity", ""},
		{"gpu model with space", &commonpb.NodeResources{Capacity: 1, GpuModel: "nvidia l4"}, "gpu_model", ""},
		{"empty capability name", &commonpb.NodeResources{Capacity: 1, Capabilities: map[string]string{"": "x"}}, "capabilities", ""},
		{"capability value control char", &commonpb.NodeResources{Capacity: 1, Capabilities: map[string]string{"a": "x\n"}}, "capabilities", "a"},
		{"capability value too long", &commonpb.NodeResources{Capacity: 1, Capabilities: map[string]string{"a": strings.Repeat("v", MaxValueLen+1)}}, "capabilities", "a"},
		{"zone too long", &commonpb.NodeResources{Capacity: 1, Zone: strings.Repeat("z", MaxNameLen+1)}, "zone", ""},
		{"zone with tab", &commonpb.NodeResources{Capacity: 1, Zone: "z\t1"}, "zone", ""},
		{"facts", &commonpb.NodeResources{Capacity: 1, Cores: []uint32{0, 2, 3, MaxCoreID}, Shape: "c6i.xlarge", Subnet: "subnet-1"}, "", ""},
		{"cores unsorted", &commonpb.NodeResources{Capacity: 1, Cores: []uint32{3, 2}}, "cores", ""},
		{"cores duplicate", &commonpb.NodeResources{Capacity: 1, Cores: []uint32{2, 2}}, "cores", ""},
		{"core id too big", &commonpb.NodeResources{Capacity: 1, Cores: []uint32{MaxCoreID + 1}}, "cores", ""},
		{"shape with space", &commonpb.NodeResources{Capacity: 1, Shape: "VM Standard"}, "shape", ""},
		{"subnet too long", &commonpb.NodeResources{Capacity: 1, Subnet: strings.Repeat("s", MaxNameLen+1)}, "subnet", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.r)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("Validate = %v (%T), want a *FieldError on %s", err, err, tc.field)
			}
			if fe.Field != tc.field || fe.Key != tc.key {
				t.Fatalf("Validate = %v: field %q key %q, want %q %q", err, fe.Field, fe.Key, tc.field, tc.key)
			}
		})
	}
	many := map[string]string{}
	for i := range MaxCapabilities + 1 {
		many[strings.Repeat("c", i+1)] = "1"
	}
	if err := Validate(&commonpb.NodeResources{Capacity: 1, Capabilities: many}); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("Validate(65 capabilities) = %v", err)
	}
}

func TestZone(t *testing.T) {
	oci, aws, slot := managerpb.NodeProvider_NODE_PROVIDER_OCI, managerpb.NodeProvider_NODE_PROVIDER_AWS, managerpb.NodeProvider_NODE_PROVIDER_CLUSTER
	tags := map[string]string{ZoneTag: "tagged"}
	cases := []struct {
		name     string
		provider managerpb.NodeProvider
		ad, rep  string
		tags     map[string]string
		want     string
	}{
		{"oci availability domain wins", oci, "AD-1", "claimed", tags, "AD-1"},
		{"aws reported az", aws, "", "eu-west-2a", tags, "eu-west-2a"},
		{"slot reported zone over tag", slot, "", "z1", tags, "z1"},
		{"slot tag", slot, "", "", tags, "tagged"},
		{"unknown", slot, "", "", nil, ""},
		{"ad ignored for a slot", slot, "AD-1", "", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Zone(tc.provider, tc.ad, tc.rep, tc.tags); got != tc.want {
				t.Fatalf("Zone = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCloud(t *testing.T) {
	if Cloud(managerpb.NodeProvider_NODE_PROVIDER_OCI) != managerpb.Cloud_CLOUD_OCI ||
		Cloud(managerpb.NodeProvider_NODE_PROVIDER_CLUSTER) != managerpb.Cloud_CLOUD_CLUSTER ||
		Cloud(managerpb.NodeProvider_NODE_PROVIDER_UNSPECIFIED) != managerpb.Cloud_CLOUD_UNSPECIFIED {
		t.Fatal("Cloud maps providers wrongly")
	}
}
