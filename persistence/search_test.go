package persistence

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func tagF(name string, c func(*managerpb.TagFilter)) *managerpb.JobFilter {
	t := &managerpb.TagFilter{TagName: name}
	c(t)
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_TagFilter{TagFilter: t}}
}

func idF(c func(*managerpb.IdFilter)) *managerpb.JobFilter {
	f := &managerpb.IdFilter{}
	c(f)
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_IdFilter{IdFilter: f}}
}

func dateF(c func(*managerpb.DateFilter)) *managerpb.JobFilter {
	f := &managerpb.DateFilter{}
	c(f)
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_DateFilter{DateFilter: f}}
}

func TestReader_SearchJobs(t *testing.T) {
	ctx := context.Background()
	store, log := TestStore(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	jobs := []struct {
		id    string
		tags  map[string]string
		start time.Time
	}{
		{"a1", map[string]string{"env": "prod", "team": "red"}, t0},
		{"a2", map[string]string{"env": "prod"}, t0.Add(time.Hour)},
		{"b1", map[string]string{"env": "dev", "team": "blue"}, t0.Add(2 * time.Hour)},
		{"b2", map[string]string{"env": "staging-eu"}, time.Time{}},
		{"c1", map[string]string{"far": "future"}, time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, j := range jobs {
		_, err := log.Append(ctx, JobKey(j.id), 0, Change{Record: jobRecord(j.id, j.tags, j.start)})
		require.NoError(t, err)
	}
	// Update a1: its old tag index entries must go.
	_, err := log.Append(ctx, JobKey("a1"), 1, Change{Record: jobRecord("a1", map[string]string{"env": "dev"}, t0)})
	require.NoError(t, err)

	ts := timestamppb.New
	cases := []struct {
		name    string
		filters []*managerpb.JobFilter
		want    []string
	}{
		{"no filter", nil, []string{"a1", "a2", "b1", "b2", "c1"}},
		{"beyond 2262", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Lt{Lt: ts(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))}
		})}, []string{"a1", "a2", "b1", "b2", "c1"}},
		{"beyond 2262 excluded", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Lt{Lt: ts(time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC))}
		})}, []string{"a1", "a2", "b1", "b2"}},
		{"tag eq", []*managerpb.JobFilter{tagF("env", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Eq{Eq: "prod"} })}, []string{"a2"}},
		{"tag eq after update", []*managerpb.JobFilter{tagF("env", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Eq{Eq: "dev"} })}, []string{"a1", "b1"}},
		{"tag neq includes absent", []*managerpb.JobFilter{tagF("team", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Neq{Neq: "blue"} })}, []string{"a1", "a2", "b2", "c1"}},
		{"tag re", []*managerpb.JobFilter{tagF("env", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Re{Re: "^sta.*-eu$"} })}, []string{"b2"}},
		{"tag exists", []*managerpb.JobFilter{tagF("team", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Exists{Exists: true} })}, []string{"b1"}},
		{"tag not exists", []*managerpb.JobFilter{tagF("team", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Exists{Exists: false} })}, []string{"a1", "a2", "b2", "c1"}},
		{"id eq", []*managerpb.JobFilter{idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Eq{Eq: "b1"} })}, []string{"b1"}},
		{"id eq unknown", []*managerpb.JobFilter{idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Eq{Eq: "zz"} })}, nil},
		{"id neq", []*managerpb.JobFilter{idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Neq{Neq: "b1"} })}, []string{"a1", "a2", "b2", "c1"}},
		{"id re", []*managerpb.JobFilter{idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Re{Re: "^b"} })}, []string{"b1", "b2"}},
		{"date eq", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Eq{Eq: ts(t0)} })}, []string{"a1"}},
		{"date lt", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Lt{Lt: ts(t0.Add(time.Hour))} })}, []string{"a1", "b2"}},
		{"date lte", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Lte{Lte: ts(t0.Add(time.Hour))} })}, []string{"a1", "a2", "b2"}},
		{"date gt", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Gt{Gt: ts(t0)} })}, []string{"a2", "b1", "c1"}},
		{"date gte", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Gte{Gte: ts(t0)} })}, []string{"a1", "a2", "b1", "c1"}},
		{"date within inclusive", []*managerpb.JobFilter{dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Within_{Within: &managerpb.DateFilter_Within{StartDate: ts(t0.Add(time.Hour)), EndDate: ts(t0.Add(2 * time.Hour))}}
		})}, []string{"a2", "b1"}},
		{"ANDed", []*managerpb.JobFilter{
			tagF("env", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Eq{Eq: "dev"} }),
			dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Gt{Gt: ts(t0)} }),
			idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Neq{Neq: "zz"} }),
		}, []string{"b1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := CompileJobQuery(tc.filters)
			require.NoError(t, err)
			var got []string
			require.NoError(t, store.View(func(r *Reader) error {
				return r.SearchJobs(q, func(rec *internalpb.JobRecord) error {
					got = append(got, rec.GetJob().GetJob().GetJobId().GetJobId())
					return nil
				})
			}))
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCompileJobQuery_Errors(t *testing.T) {
	cases := []struct {
		name   string
		filter *managerpb.JobFilter
		field  string
	}{
		{"empty filter", &managerpb.JobFilter{}, "job_filter"},
		{"empty tag name", tagF("", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Eq{Eq: "x"} }), "tag_filter.tagName"},
		{"tag without comparison", tagF("a", func(f *managerpb.TagFilter) {}), "tag_filter"},
		{"bad tag regex", tagF("a", func(f *managerpb.TagFilter) { f.Comparison = &managerpb.TagFilter_Re{Re: "(["} }), "tag_filter.re"},
		{"bad id regex", idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Re{Re: "a**"} }), "id_filter.re"},
		{"id without comparison", idF(func(f *managerpb.IdFilter) {}), "id_filter"},
		{"date without comparison", dateF(func(f *managerpb.DateFilter) {}), "date_filter"},
		{"within missing end", dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Within_{Within: &managerpb.DateFilter_Within{StartDate: timestamppb.Now()}}
		}), "date_filter.within.end_date"},
		{"within reversed", dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Within_{Within: &managerpb.DateFilter_Within{StartDate: timestamppb.Now(), EndDate: timestamppb.New(time.Unix(0, 0))}}
		}), "date_filter.within"},
		{"invalid timestamp", dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Lt{Lt: &timestamppb.Timestamp{Nanos: -5}}
		}), "date_filter.lt"},
		{"unset timestamp", dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Gte{}
		}), "date_filter.gte"},
		{"huge regex", idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Re{Re: strings.Repeat("(a|b)*", 1000)} }), "id_filter.re"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompileJobQuery([]*managerpb.JobFilter{{}, tc.filter}[1:])
			var fe *FilterError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field)
			require.Equal(t, 0, fe.Index)
		})
	}
}
