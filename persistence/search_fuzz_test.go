package persistence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// FuzzCompileJobQuery feeds JobSearchRequest bytes to the search filter
// compiler and runs what compiles against a store of a few jobs. It must
// never panic; a refusal is a *FilterError naming a filter of the request
// and a field; and the index-driven search returns exactly the jobs that
// every filter matches when checked one by one (the index paths — tag
// value, tag name, id, start time — agree with the filters themselves).
func FuzzCompileJobQuery(f *testing.F) {
	ts := timestamppb.New
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	seeds := [][]*managerpb.JobFilter{
		nil,
		{tagF("env", func(t *managerpb.TagFilter) { t.Comparison = &managerpb.TagFilter_Eq{Eq: "prod"} })},
		{tagF("env", func(t *managerpb.TagFilter) { t.Comparison = &managerpb.TagFilter_Re{Re: "^st.*-eu$"} }),
			idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Neq{Neq: "a1"} })},
		{tagF("team", func(t *managerpb.TagFilter) { t.Comparison = &managerpb.TagFilter_Exists{Exists: false} })},
		{idF(func(f *managerpb.IdFilter) { f.Comparison = &managerpb.IdFilter_Re{Re: "b"} })},
		{dateF(func(f *managerpb.DateFilter) {
			f.Comparison = &managerpb.DateFilter_Within_{Within: &managerpb.DateFilter_Within{StartDate: ts(t0), EndDate: ts(t0.Add(time.Hour))}}
		})},
		{dateF(func(f *managerpb.DateFilter) { f.Comparison = &managerpb.DateFilter_Lt{Lt: ts(t0)} })},
		{{}}, // an empty filter
	}
	for _, s := range seeds {
		b, err := proto.Marshal(&managerpb.JobSearchRequest{JobFilter: s})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	store, log := TestStore(f)
	jobs := map[string]*managerpb.Job{}
	for _, j := range []struct {
		id    string
		tags  map[string]string
		start time.Time
	}{
		{"a1", map[string]string{"env": "prod", "team": "red"}, t0},
		{"a2", map[string]string{"env": "prod", "": "empty name"}, t0.Add(time.Hour)},
		{"b1", map[string]string{"env": "dev", "team": "blue\x00nul"}, t0.Add(2 * time.Hour)},
		{"b2", map[string]string{"env": "staging-eu"}, time.Time{}},
		{"c1", map[string]string{"far": "future"}, time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"d1", nil, time.Unix(0, 0).UTC()},
	} {
		rec := jobRecord(j.id, j.tags, j.start)
		if _, err := log.Append(context.Background(), JobKey(j.id), 0, Change{Record: rec}); err != nil {
			f.Fatal(err)
		}
		var r internalpb.JobRecord
		if err := proto.Unmarshal(rec, &r); err != nil {
			f.Fatal(err)
		}
		jobs[j.id] = r.GetJob().GetJob()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req managerpb.JobSearchRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		q, err := CompileJobQuery(req.GetJobFilter())
		if err != nil {
			fe, ok := errors.AsType[*FilterError](err)
			switch {
			case !ok:
				t.Fatalf("refusal %v (%T) is not a *FilterError", err, err)
			case fe.Index < -1 || fe.Index >= len(req.GetJobFilter()):
				t.Fatalf("refusal %v names filter %d of %d", err, fe.Index, len(req.GetJobFilter()))
			case fe.Field == "" || fe.Reason == "":
				t.Fatalf("refusal %v names no field or reason", err)
			case !strings.HasPrefix(err.Error(), "job_filter"):
				t.Fatalf("refusal %q does not start with job_filter", err)
			}
			return
		}
		var want []string
		for id, job := range jobs {
			if matchesAll(q, id, job) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		var got []string
		err = store.View(func(r *Reader) error {
			return r.SearchJobs(q, func(rec *internalpb.JobRecord) error {
				got = append(got, rec.GetJob().GetJob().GetJobId().GetJobId())
				return nil
			})
		})
		if err != nil {
			t.Fatalf("search of a compiled query failed: %v", err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("search found %v; the filters one by one match %v (request %v)", got, want, &req)
		}
	})
}

func matchesAll(q *JobQuery, id string, job *managerpb.Job) bool {
	for _, f := range q.filters {
		if !f.match(id, job) {
			return false
		}
	}
	return true
}
