package client

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Filter builders for JobSearch. The manager ANDs the filters of one search.
// Regular expressions are evaluated by the manager (this project's manager:
// Go RE2 syntax, unanchored, so anchor with ^…$ for a whole-value match);
// date filters compare a job's start_date_time.

// TagEq matches jobs whose tag name has exactly value.
func TagEq(name, value string) *managerpb.JobFilter {
	return tagFilter(&managerpb.TagFilter{TagName: name, Comparison: &managerpb.TagFilter_Eq{Eq: value}})
}

// TagNeq matches jobs whose tag name is absent or differs from value.
func TagNeq(name, value string) *managerpb.JobFilter {
	return tagFilter(&managerpb.TagFilter{TagName: name, Comparison: &managerpb.TagFilter_Neq{Neq: value}})
}

// TagRe matches jobs whose tag name matches the regular expression re.
func TagRe(name, re string) *managerpb.JobFilter {
	return tagFilter(&managerpb.TagFilter{TagName: name, Comparison: &managerpb.TagFilter_Re{Re: re}})
}

// TagExists matches jobs that have the tag name, whatever its value.
func TagExists(name string) *managerpb.JobFilter {
	return tagFilter(&managerpb.TagFilter{TagName: name, Comparison: &managerpb.TagFilter_Exists{Exists: true}})
}

// TagAbsent matches jobs that do not have the tag name.
func TagAbsent(name string) *managerpb.JobFilter {
	return tagFilter(&managerpb.TagFilter{TagName: name, Comparison: &managerpb.TagFilter_Exists{Exists: false}})
}

// tagFilter wraps a tag comparison.
func tagFilter(f *managerpb.TagFilter) *managerpb.JobFilter {
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_TagFilter{TagFilter: f}}
}

// IDEq matches the job id.
func IDEq(id JobID) *managerpb.JobFilter {
	return idFilter(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Eq{Eq: string(id)}})
}

// IDNeq matches every job but id.
func IDNeq(id JobID) *managerpb.JobFilter {
	return idFilter(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Neq{Neq: string(id)}})
}

// IDRe matches jobs whose id matches the regular expression re.
func IDRe(re string) *managerpb.JobFilter {
	return idFilter(&managerpb.IdFilter{Comparison: &managerpb.IdFilter_Re{Re: re}})
}

// idFilter wraps an id comparison.
func idFilter(f *managerpb.IdFilter) *managerpb.JobFilter {
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_IdFilter{IdFilter: f}}
}

// DateEq matches jobs starting exactly at t.
func DateEq(t time.Time) *managerpb.JobFilter {
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Eq{Eq: timestamppb.New(t)}})
}

// DateLt matches jobs starting before t.
func DateLt(t time.Time) *managerpb.JobFilter {
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Lt{Lt: timestamppb.New(t)}})
}

// DateLte matches jobs starting at or before t.
func DateLte(t time.Time) *managerpb.JobFilter {
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Lte{Lte: timestamppb.New(t)}})
}

// DateGt matches jobs starting after t.
func DateGt(t time.Time) *managerpb.JobFilter {
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Gt{Gt: timestamppb.New(t)}})
}

// DateGte matches jobs starting at or after t.
func DateGte(t time.Time) *managerpb.JobFilter {
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Gte{Gte: timestamppb.New(t)}})
}

// DateWithin matches jobs starting between start and end (the manager
// decides whether the bounds are inclusive).
func DateWithin(start, end time.Time) *managerpb.JobFilter {
	w := &managerpb.DateFilter_Within{StartDate: timestamppb.New(start), EndDate: timestamppb.New(end)}
	return dateFilter(&managerpb.DateFilter{Comparison: &managerpb.DateFilter_Within_{Within: w}})
}

// dateFilter wraps a date comparison.
func dateFilter(f *managerpb.DateFilter) *managerpb.JobFilter {
	return &managerpb.JobFilter{JobFilter: &managerpb.JobFilter_DateFilter{DateFilter: f}}
}
