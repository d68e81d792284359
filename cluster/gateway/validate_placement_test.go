package gateway

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestValidateJob_AutoPlacement: a job's placement requirements are
// refused at CreateJob/UpdateJob, naming the field, when the engine could
// never place them (before, a negative, NaN or infinite capacity was
// stored and the job waited forever with "invalid ask").
func TestValidateJob_AutoPlacement(t *testing.T) {
	auto := func(r *managerpb.JobRequirements, tags ...string) *managerpb.Job {
		j := &managerpb.Job{AutoPlacement: &managerpb.AutoPlacement{Requirements: r}}
		if len(tags) == 2 {
			j.Tags = map[string]string{tags[0]: tags[1]}
		}
		return j
	}
	caps := func(kv ...string) []*managerpb.CapabilityRequirement {
		var out []*managerpb.CapabilityRequirement
		for i := 0; i < len(kv); i += 2 {
			out = append(out, &managerpb.CapabilityRequirement{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	const req = "job.auto_placement.requirements."
	cases := []struct {
		name  string
		job   *managerpb.Job
		field string // "" = valid
	}{
		{"no requirements", auto(nil), ""},
		{"full", auto(&managerpb.JobRequirements{RequiredCapacity: 2.5, RequiredCores: &commonpb.OptionalInt{Value: 4},
			RequiredGpuCapacity: &commonpb.OptionalFloat{Value: 1}, RequiredGpuModel: &commonpb.OptionalString{Value: "nvidia-l4"},
			RequiredCapabilities: caps("nvenc", "yes", "av1", "hw"), PriorityBand: managerpb.PriorityBand_PRIORITY_BAND_HIGH}, "pool", "live"), ""},
		{"zero capacity", auto(&managerpb.JobRequirements{RequiredCapacity: 0}), ""},
		{"negative capacity", auto(&managerpb.JobRequirements{RequiredCapacity: -1}), req + "required_capacity"},
		{"NaN capacity", auto(&managerpb.JobRequirements{RequiredCapacity: math.NaN()}), req + "required_capacity"},
		{"infinite capacity", auto(&managerpb.JobRequirements{RequiredCapacity: math.Inf(1)}), req + "required_capacity"},
		{"capacity above any node", auto(&managerpb.JobRequirements{RequiredCapacity: 1e300}), req + "required_capacity"},
		{"negative GPU capacity", auto(&managerpb.JobRequirements{RequiredGpuCapacity: &commonpb.OptionalFloat{Value: -1}}), req + "required_gpu_capacity"},
		{"NaN GPU capacity", auto(&managerpb.JobRequirements{RequiredGpuCapacity: &commonpb.OptionalFloat{Value: float32(math.NaN())}}), req + "required_gpu_capacity"},
		{"zero cores", auto(&managerpb.JobRequirements{RequiredCores: &commonpb.OptionalInt{Value: 0}}), req + "required_cores"},
		{"more cores than any node", auto(&managerpb.JobRequirements{RequiredCores: &commonpb.OptionalInt{Value: 2_000_000_000}}), req + "required_cores"},
		{"empty GPU model", auto(&managerpb.JobRequirements{RequiredGpuModel: &commonpb.OptionalString{Value: ""}}), req + "required_gpu_model"},
		{"GPU model with a space", auto(&managerpb.JobRequirements{RequiredGpuModel: &commonpb.OptionalString{Value: "A 100"}}), req + "required_gpu_model"},
		{"capability without a name", auto(&managerpb.JobRequirements{RequiredCapabilities: caps("", "x")}), req + "required_capabilities[0].name"},
		{"capability without a value", auto(&managerpb.JobRequirements{RequiredCapabilities: caps("nvenc", "")}), req + "required_capabilities[0].value"},
		{"capability twice", auto(&managerpb.JobRequirements{RequiredCapabilities: caps("a", "x", "a", "y")}), req + "required_capabilities[1].name"},
		{"unknown priority band", auto(&managerpb.JobRequirements{PriorityBand: managerpb.PriorityBand(7)}), req + "priority_band"},
		{"pool tag that no pool can have", auto(nil, "pool", "../x"), "job.tags[pool]"},
		{"pool tag of a manual job is just a tag", &managerpb.Job{Tags: map[string]string{"pool": "a b"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateJob(tc.job)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestValidateBundle_Placement: a bundle job's requirements follow the
// same rules, and a pool a bundle names must be a possible pool name.
func TestValidateBundle_Placement(t *testing.T) {
	bundle := func(pool, backupPool string, r *managerpb.JobRequirements) *managerpb.Bundle {
		b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, Pool: pool,
			Jobs: []*managerpb.BundleJobSpec{{JobName: "a", Requirements: r}}}
		if backupPool != "" {
			b.ResiliencePolicy = &managerpb.ResiliencePolicy{Pool: backupPool}
		}
		return b
	}
	cases := []struct {
		name   string
		bundle *managerpb.Bundle
		field  string
	}{
		{"valid", bundle("live", "live-backup", &managerpb.JobRequirements{RequiredCapacity: 1}), ""},
		{"no pool", bundle("", "", nil), ""},
		{"negative capacity", bundle("live", "", &managerpb.JobRequirements{RequiredCapacity: -5}), "bundle.jobs[0].requirements.required_capacity"},
		{"NaN capacity", bundle("live", "", &managerpb.JobRequirements{RequiredCapacity: math.NaN()}), "bundle.jobs[0].requirements.required_capacity"},
		{"zero cores", bundle("live", "", &managerpb.JobRequirements{RequiredCores: &commonpb.OptionalInt{}}), "bundle.jobs[0].requirements.required_cores"},
		{"pool with a space", bundle("bad pool", "", nil), "bundle.pool"},
		{"backup pool with a slash", bundle("live", "a/b", nil), "bundle.resilience_policy.pool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateBundle(tc.bundle)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}
