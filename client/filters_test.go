package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestFilters_Build(t *testing.T) {
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	tag := func(tf *managerpb.TagFilter) *managerpb.JobFilter {
		return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_TagFilter{TagFilter: tf}}
	}
	id := func(c *managerpb.IdFilter) *managerpb.JobFilter {
		return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_IdFilter{IdFilter: c}}
	}
	date := func(c *managerpb.DateFilter) *managerpb.JobFilter {
		return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_DateFilter{DateFilter: c}}
	}
	ts1, ts2 := timestamppb.New(t1), timestamppb.New(t2)
	cases := []struct {
		name string
		got  *managerpb.JobFilter
		want *managerpb.JobFilter
	}{
		{"TagEq", client.TagEq("k", "v"), tag(&managerpb.TagFilter{TagName: "k", Comparison: &managerpb.TagFilter_Eq{Eq: "v"}})},
		{"TagNeq", client.TagNeq("k", "v"), tag(&managerpb.TagFilter{TagName: "k", Comparison: &managerpb.TagFilter_Neq{Neq: "v"}})},
		{"TagRe", client.TagRe("k", "^v"), tag(&managerpb.TagFilter{TagName: "k", Comparison: &managerpb.TagFilter_Re{Re: "^v"}})},
		{"TagExists", client.TagExists("k"), tag(&managerpb.TagFilter{TagName: "k", Comparison: &managerpb.TagFilter_Exists{Exists: true}})},
		{"TagAbsent", client.TagAbsent("k"), tag(&managerpb.TagFilter{TagName: "k", Comparison: &managerpb.TagFilter_Exists{Exists: false}})},
		{"IDEq", client.IDEq("a"), id(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Eq{Eq: "a"}})},
		{"IDNeq", client.IDNeq("a"), id(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Neq{Neq: "a"}})},
		{"IDRe", client.IDRe("a.*"), id(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Re{Re: "a.*"}})},
		{"DateEq", client.DateEq(t1), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Eq{Eq: ts1}})},
		{"DateLt", client.DateLt(t1), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Lt{Lt: ts1}})},
		{"DateLte", client.DateLte(t1), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Lte{Lte: ts1}})},
		{"DateGt", client.DateGt(t1), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Gt{Gt: ts1}})},
		{"DateGte", client.DateGte(t1), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Gte{Gte: ts1}})},
		{"DateWithin", client.DateWithin(t1, t2), date(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Within_{
			Within: &managerpb.DateFilter_Within{StartDate: ts1, EndDate: ts2}}})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !proto.Equal(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// TestNorskManager_JobSearch_Filters runs the builders against the fake, so
// that what they build is what a manager evaluates.
func TestNorskManager_JobSearch_Filters(t *testing.T) {
	_, _, m := serveFake(t)
	ctx := context.Background()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, spec := range []struct {
		id   string
		tags map[string]string
	}{
		{"alpha", map[string]string{"env": "prod", "team": "a"}},
		{"beta", map[string]string{"env": "dev"}},
		{"gamma", map[string]string{"env": "prod"}},
	} {
		job := &managerpb.Job{
			JobId:         &commonpb.JobId{JobId: spec.id},
			Tags:          spec.tags,
			StartDateTime: timestamppb.New(base.Add(time.Duration(i) * time.Hour)),
		}
		if _, err := m.CreateJob(ctx, job); err != nil {
			t.Fatalf("CreateJob(%s): %v", spec.id, err)
		}
	}
	cases := []struct {
		name    string
		filters []*managerpb.JobFilter
		want    []string
	}{
		{"none", nil, []string{"alpha", "beta", "gamma"}},
		{"tag eq", []*managerpb.JobFilter{client.TagEq("env", "prod")}, []string{"alpha", "gamma"}},
		{"tag neq", []*managerpb.JobFilter{client.TagNeq("env", "prod")}, []string{"beta"}},
		{"tag re", []*managerpb.JobFilter{client.TagRe("env", "^d")}, []string{"beta"}},
		{"tag exists", []*managerpb.JobFilter{client.TagExists("team")}, []string{"alpha"}},
		{"tag absent", []*managerpb.JobFilter{client.TagAbsent("team")}, []string{"beta", "gamma"}},
		{"id eq", []*managerpb.JobFilter{client.IDEq("beta")}, []string{"beta"}},
		{"id neq", []*managerpb.JobFilter{client.IDNeq("beta")}, []string{"alpha", "gamma"}},
		{"id re", []*managerpb.JobFilter{client.IDRe("^(a|g)")}, []string{"alpha", "gamma"}},
		{"date gt", []*managerpb.JobFilter{client.DateGt(base)}, []string{"beta", "gamma"}},
		{"date lte", []*managerpb.JobFilter{client.DateLte(base.Add(time.Hour))}, []string{"alpha", "beta"}},
		{"date within", []*managerpb.JobFilter{client.DateWithin(base.Add(time.Minute), base.Add(3*time.Hour))}, []string{"beta", "gamma"}},
		{"and", []*managerpb.JobFilter{client.TagEq("env", "prod"), client.DateGte(base.Add(time.Hour))}, []string{"gamma"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := m.JobSearch(ctx, tc.filters...)
			if err != nil {
				t.Fatalf("JobSearch: %v", err)
			}
			var got []string
			for _, j := range jobs {
				got = append(got, j.GetJob().GetJobId().GetJobId())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("JobSearch = %v, want %v", got, tc.want)
			}
		})
	}
}
