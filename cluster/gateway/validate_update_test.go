package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// requireInvalidField checks err is nil for field "" and otherwise
// InvalidArgument whose message starts with the field.
func requireInvalidField(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), field+":") {
		t.Fatalf("got %v, want InvalidArgument naming %s", err, field)
	}
}

func TestValidateJob_UpdateStrategy(t *testing.T) {
	const migrate = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	auto := &managerpb.AutoPlacement{}
	cases := []struct {
		name  string
		job   *managerpb.Job
		field string
	}{
		{"default in place", &managerpb.Job{}, ""},
		{"migrate with auto_placement", &managerpb.Job{UpdateStrategy: migrate, AutoPlacement: auto}, ""},
		{"migrate placed by hand", &managerpb.Job{UpdateStrategy: migrate}, "job.update_strategy"},
		{"unknown value", &managerpb.Job{UpdateStrategy: 7, AutoPlacement: auto}, "job.update_strategy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { requireInvalidField(t, validateJob(tc.job), tc.field) })
	}
}

func TestValidateBundle_UpdateStrategy(t *testing.T) {
	const migrate = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	b := func(s managerpb.UpdateStrategy, tmpl *managerpb.Job) *managerpb.Bundle {
		return &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, UpdateStrategy: s,
			Jobs: []*managerpb.BundleJobSpec{{JobName: "a", Job: tmpl}}}
	}
	cases := []struct {
		name   string
		bundle *managerpb.Bundle
		field  string
	}{
		{"default", b(0, nil), ""},
		{"migrate (derived jobs are auto-placed)", b(migrate, &managerpb.Job{}), ""},
		{"template repeats the bundle's", b(migrate, &managerpb.Job{UpdateStrategy: migrate}), ""},
		{"template differs", b(0, &managerpb.Job{UpdateStrategy: migrate}), "bundle.jobs[0].job.update_strategy"},
		{"template unknown", b(migrate, &managerpb.Job{UpdateStrategy: 9}), "bundle.jobs[0].job.update_strategy"},
		{"unknown value", b(5, nil), "bundle.update_strategy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before string
			if tc.bundle.GetJobs()[0].GetJob() != nil {
				before = tc.bundle.GetJobs()[0].GetJob().GetUpdateStrategy().String()
			}
			requireInvalidField(t, validateBundle(tc.bundle), tc.field)
			if tmpl := tc.bundle.GetJobs()[0].GetJob(); tmpl != nil && tmpl.GetUpdateStrategy().String() != before {
				t.Fatalf("validation changed the template's update_strategy to %s", tmpl.GetUpdateStrategy())
			}
		})
	}
}
