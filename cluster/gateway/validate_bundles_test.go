package gateway

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestValidateBundle(t *testing.T) {
	js := func(name string, mod ...func(*managerpb.BundleJobSpec)) *managerpb.BundleJobSpec {
		s := &managerpb.BundleJobSpec{JobName: name}
		for _, m := range mod {
			m(s)
		}
		return s
	}
	colo := func(names ...string) func(*managerpb.BundleJobSpec) {
		return func(s *managerpb.BundleJobSpec) { s.CoLocateWith = names }
	}
	sep := func(names ...string) func(*managerpb.BundleJobSpec) {
		return func(s *managerpb.BundleJobSpec) { s.SeparateFrom = names }
	}
	tmpl := func(j *managerpb.Job) func(*managerpb.BundleJobSpec) {
		return func(s *managerpb.BundleJobSpec) { s.Job = j }
	}
	mode := func(m string) func(*managerpb.BundleJobSpec) {
		return func(s *managerpb.BundleJobSpec) { s.StartMode = m }
	}
	bundle := func(id string, jobs ...*managerpb.BundleJobSpec) *managerpb.Bundle {
		return &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: id}, Jobs: jobs}
	}
	many := make([]*managerpb.BundleJobSpec, maxBundleJobs+1)
	for i := range many {
		many[i] = js(fmt.Sprintf("j%d", i))
	}
	cases := []struct {
		name   string
		bundle *managerpb.Bundle
		field  string // "" = valid
	}{
		{"minimal", bundle("b1", js("a")), ""},
		{"full", &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "live-2026.eu_1"}, Pool: "eu",
			ResiliencePolicy: &managerpb.ResiliencePolicy{Pool: "eu-backup", SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
			Jobs: []*managerpb.BundleJobSpec{js("enc", colo("pkg"), mode("manual"), tmpl(&managerpb.Job{Tags: map[string]string{"team": "x"},
				Services: []*commonpb.Service{{Name: "web"}}})), js("pkg", sep("mon"), mode("auto")), js("mon")}}, ""},
		{"64 jobs", bundle("b", many[:maxBundleJobs]...), ""},
		{"tag key merely resembling a reserved one", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"bundleIdx": "x", "my-dormant": "y"}}))), ""},
		{"empty id", bundle("", js("a")), "bundle.bundle_id"},
		{"id with slash", bundle("a/b", js("a")), "bundle.bundle_id"},
		{"id starting with dot", bundle(".a", js("a")), "bundle.bundle_id"},
		{"id too long", bundle(strings.Repeat("x", maxBundleIDLen+1), js("a")), "bundle.bundle_id"},
		{"no jobs", bundle("b"), "bundle.jobs"},
		{"65 jobs", bundle("b", many...), "bundle.jobs"},
		{"empty job name", bundle("b", js("")), "bundle.jobs[0].job_name"},
		{"bundle job with a cpu list", bundle("b", js("a", tmpl(&managerpb.Job{NorskCpuList: []uint32{3}}))), "bundle.jobs[0].job.norsk_cpu_list"},
		{"job name with dot", bundle("b", js("a.b")), "bundle.jobs[0].job_name"},
		{"job name too long", bundle("b", js(strings.Repeat("n", maxJobNameLen+1))), "bundle.jobs[0].job_name"},
		{"duplicate job name", bundle("b", js("a"), js("a")), "bundle.jobs[1].job_name"},
		{"bad start mode", bundle("b", js("a", mode("later"))), "bundle.jobs[0].start_mode"},
		{"co-locate with unknown", bundle("b", js("a", colo("zz"))), "bundle.jobs[0].co_locate_with[0]"},
		{"co-locate with itself", bundle("b", js("a", colo("a"))), "bundle.jobs[0].co_locate_with[0]"},
		{"separate from unknown", bundle("b", js("a"), js("b", sep("a", "zz"))), "bundle.jobs[1].separate_from[1]"},
		{"contradiction", bundle("b", js("a", colo("b")), js("b", sep("a"))), "bundle.jobs[1].separate_from[0]"},
		{"transitive contradiction", bundle("b", js("a", colo("b")), js("b", colo("c")), js("c", sep("a"))), "bundle.jobs[2].separate_from[0]"},
		{"invalid template", bundle("b", js("a", tmpl(&managerpb.Job{Services: []*commonpb.Service{{Name: ""}}}))), "bundle.jobs[0].job.services[0].name"},
		{"reserved tag", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"dormant": "false"}}))), "bundle.jobs[0].job.tags"},
		{"reserved tag bundleId", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"bundleId": "x"}}))), "bundle.jobs[0].job.tags"},
		{"reserved tag in another case: BundleID", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"BundleID": "x"}}))), "bundle.jobs[0].job.tags"},
		{"reserved tag in another case: replicaindex", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"replicaindex": "0"}}))), "bundle.jobs[0].job.tags"},
		{"reserved tag in another case: JOBNAME", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"JOBNAME": "a"}}))), "bundle.jobs[0].job.tags"},
		{"reserved tag in another case: Dormant", bundle("b", js("a", tmpl(&managerpb.Job{Tags: map[string]string{"Dormant": "true"}}))), "bundle.jobs[0].job.tags"},
		{"bad pool", &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, Pool: "a\x00", Jobs: []*managerpb.BundleJobSpec{js("a")}}, "bundle.pool"},
		{"too large", bundle("b", js("a", tmpl(&managerpb.Job{Description: strings.Repeat("d", maxJobBytes/2)})),
			js("c", tmpl(&managerpb.Job{Description: strings.Repeat("d", maxJobBytes/2)}))), "bundle"},
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

func TestBundleJobRef(t *testing.T) {
	cases := []struct {
		name    string
		id      string
		replica uint32
		job     string
		field   string
	}{
		{"ok", "b", 1, "enc", ""},
		{"no bundle", "", 0, "enc", "bundle_id"},
		{"replica 2", "b", 2, "enc", "replica_index"},
		{"bad job name", "b", 0, "a b", "job_name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bundleJobRef(&managerpb.BundleId{BundleId: tc.id}, tc.replica, tc.job)
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
