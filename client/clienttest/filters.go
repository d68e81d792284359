package clienttest

import (
	"errors"
	"regexp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// matchAll reports whether job matches every filter. Regular expressions
// are Go RE2, unanchored; date filters compare start_date_time and never
// match a job without one. An invalid regular expression or an empty filter
// is codes.InvalidArgument.
func matchAll(job *managerpb.Job, filters []*managerpb.JobFilter) (bool, error) {
	for i, f := range filters {
		ok, err := match(job, f)
		if err != nil {
			return false, status.Errorf(codes.InvalidArgument, "job_filter[%d]: %v", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// match evaluates one filter.
func match(job *managerpb.Job, f *managerpb.JobFilter) (bool, error) {
	switch {
	case f.GetTagFilter() != nil:
		return matchTag(job, f.GetTagFilter())
	case f.GetIdFilter() != nil:
		return matchID(job.GetJobId().GetJobId(), f.GetIdFilter())
	case f.GetDateFilter() != nil:
		return matchDate(job, f.GetDateFilter())
	}
	return false, errEmpty
}

// errEmpty is the error of a filter or comparison without a value.
var errEmpty = errors.New("empty filter")

// matchTag evaluates a tag filter.
func matchTag(job *managerpb.Job, f *managerpb.TagFilter) (bool, error) {
	v, ok := job.GetTags()[f.GetTagName()]
	switch c := f.GetComparison().(type) {
	case *managerpb.TagFilter_Eq:
		return ok && v == c.Eq, nil
	case *managerpb.TagFilter_Neq:
		return !ok || v != c.Neq, nil
	case *managerpb.TagFilter_Re:
		return matchRe(c.Re, v, ok)
	case *managerpb.TagFilter_Exists:
		return ok == c.Exists, nil
	}
	return false, errEmpty
}

// matchID evaluates an id filter.
func matchID(id string, f *managerpb.IdFilter) (bool, error) {
	switch c := f.GetComparison().(type) {
	case *managerpb.IdFilter_Eq:
		return id == c.Eq, nil
	case *managerpb.IdFilter_Neq:
		return id != c.Neq, nil
	case *managerpb.IdFilter_Re:
		return matchRe(c.Re, id, true)
	}
	return false, errEmpty
}

// matchRe matches v (if present) against the expression re.
func matchRe(re, v string, present bool) (bool, error) {
	rx, err := regexp.Compile(re)
	if err != nil {
		return false, err
	}
	return present && rx.MatchString(v), nil
}

// matchDate evaluates a date filter against start_date_time.
func matchDate(job *managerpb.Job, f *managerpb.DateFilter) (bool, error) {
	if job.GetStartDateTime() == nil {
		return false, nil
	}
	t := job.GetStartDateTime().AsTime()
	switch c := f.GetComparison().(type) {
	case *managerpb.DateFilter_Eq:
		return t.Equal(c.Eq.AsTime()), nil
	case *managerpb.DateFilter_Lt:
		return t.Before(c.Lt.AsTime()), nil
	case *managerpb.DateFilter_Lte:
		return !t.After(c.Lte.AsTime()), nil
	case *managerpb.DateFilter_Gt:
		return t.After(c.Gt.AsTime()), nil
	case *managerpb.DateFilter_Gte:
		return !t.Before(c.Gte.AsTime()), nil
	case *managerpb.DateFilter_Within_:
		return !t.Before(c.Within.GetStartDate().AsTime()) && !t.After(c.Within.GetEndDate().AsTime()), nil
	}
	return false, errEmpty
}
