package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// FilterError reports an invalid JobSearch filter: Index is its position in
// the request's job_filter list (0-based), Field the offending field.
type FilterError struct {
	Index  int
	Field  string
	Reason string
}

// Error reads "job_filter[i].field: reason" ("job_filter: reason" for
// Index -1, the list as a whole).
func (e *FilterError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("job_filter[%d].%s: %s", e.Index, e.Field, e.Reason)
}

// JobQuery is a compiled JobSearch: filters ANDed (wire format 1.0.384
// JobSearchRequest). Semantics, on each job:
//
//   - tag eq: the tag is present with exactly that value; neq: the tag is
//     absent or has another value; re: the tag is present and its value
//     contains a match of the RE2 expression (anchor with ^…$ for a full
//     match); exists: true = present, false = absent.
//   - id eq / neq / re: the same on the job id.
//   - date (on start_date_time; unset counts as the Unix epoch): eq is the
//     same instant to the nanosecond; lt, lte, gt, gte as named; within is
//     start_date ≤ t ≤ end_date, both bounds inclusive.
//
// Execution reads indexes, not every job: each filter that can be answered
// from an index (tag eq/exists/re by tag name, id eq, id re over the key
// space, dates over the start-time index) yields a candidate id set; the
// sets are intersected, and only the remaining jobs are loaded and checked
// against every filter. Only a query made solely of negations (neq,
// exists=false) walks all job ids.
type JobQuery struct {
	filters []compiledFilter
}

type compiledFilter struct {
	match func(id string, job *managerpb.Job) bool
	// candidates returns the ids the filter can possibly match, read from
	// an index; nil means the filter cannot narrow the search.
	candidates func(r *Reader) (map[string]struct{}, error)
}

// MaxJobFilters bounds the filters of one JobSearch: each may compile a
// regular expression of up to MaxRegexpLen bytes, and each walks an index.
const MaxJobFilters = 64

// CompileJobQuery validates and compiles filters. Errors are *FilterError
// (Index -1 with Field "job_filter" for too many filters).
func CompileJobQuery(filters []*managerpb.JobFilter) (*JobQuery, error) {
	if len(filters) > MaxJobFilters {
		return nil, &FilterError{Index: -1, Field: "job_filter", Reason: fmt.Sprintf("%d filters; the limit is %d", len(filters), MaxJobFilters)}
	}
	q := &JobQuery{}
	for i, f := range filters {
		var cf compiledFilter
		var err error
		switch x := f.GetJobFilter().(type) {
		case *managerpb.JobFilter_TagFilter:
			cf, err = compileTag(i, x.TagFilter)
		case *managerpb.JobFilter_IdFilter:
			cf, err = compileID(i, x.IdFilter)
		case *managerpb.JobFilter_DateFilter:
			cf, err = compileDate(i, x.DateFilter)
		default:
			err = &FilterError{Index: i, Field: "job_filter", Reason: "empty filter: set one of tag_filter, id_filter, date_filter"}
		}
		if err != nil {
			return nil, err
		}
		q.filters = append(q.filters, cf)
	}
	return q, nil
}

// MaxRegexpLen bounds the length of a filter's regular expression, in
// bytes: compiling one costs memory in proportion to its size.
const MaxRegexpLen = 1024

func compileRegexp(i int, field, expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexpLen {
		return nil, &FilterError{Index: i, Field: field, Reason: fmt.Sprintf("regular expression of %d bytes; the limit is %d", len(expr), MaxRegexpLen)}
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, &FilterError{Index: i, Field: field, Reason: fmt.Sprintf("invalid regular expression %q: %v", expr, err)}
	}
	return re, nil
}

func compileTag(i int, t *managerpb.TagFilter) (compiledFilter, error) {
	name := t.GetTagName()
	if name == "" {
		return compiledFilter{}, &FilterError{Index: i, Field: "tag_filter.tagName", Reason: "must not be empty"}
	}
	switch c := t.GetComparison().(type) {
	case *managerpb.TagFilter_Eq:
		return compiledFilter{
			match: func(_ string, j *managerpb.Job) bool { v, ok := j.GetTags()[name]; return ok && v == c.Eq },
			candidates: func(r *Reader) (map[string]struct{}, error) {
				return r.idSet(jobTagValuePrefix(name, c.Eq), func(rest []byte) (string, bool) { return string(rest), true })
			},
		}, nil
	case *managerpb.TagFilter_Neq:
		return compiledFilter{match: func(_ string, j *managerpb.Job) bool { v, ok := j.GetTags()[name]; return !ok || v != c.Neq }}, nil
	case *managerpb.TagFilter_Re:
		re, err := compileRegexp(i, "tag_filter.re", c.Re)
		if err != nil {
			return compiledFilter{}, err
		}
		return compiledFilter{
			match: func(_ string, j *managerpb.Job) bool { v, ok := j.GetTags()[name]; return ok && re.MatchString(v) },
			candidates: func(r *Reader) (map[string]struct{}, error) {
				return r.idSet(jobTagNamePrefix(name), func(rest []byte) (string, bool) {
					v, id, ok := readLP(rest)
					return string(id), ok && re.MatchString(v)
				})
			},
		}, nil
	case *managerpb.TagFilter_Exists:
		if !c.Exists {
			return compiledFilter{match: func(_ string, j *managerpb.Job) bool { _, ok := j.GetTags()[name]; return !ok }}, nil
		}
		return compiledFilter{
			match: func(_ string, j *managerpb.Job) bool { _, ok := j.GetTags()[name]; return ok },
			candidates: func(r *Reader) (map[string]struct{}, error) {
				return r.idSet(jobTagNamePrefix(name), func(rest []byte) (string, bool) {
					_, id, ok := readLP(rest)
					return string(id), ok
				})
			},
		}, nil
	}
	return compiledFilter{}, &FilterError{Index: i, Field: "tag_filter", Reason: "no comparison: set one of eq, neq, re, exists"}
}

func compileID(i int, f *managerpb.IdFilter) (compiledFilter, error) {
	switch c := f.GetComparison().(type) {
	case *managerpb.IdFilter_Eq:
		return compiledFilter{
			match: func(id string, _ *managerpb.Job) bool { return id == c.Eq },
			candidates: func(r *Reader) (map[string]struct{}, error) {
				return map[string]struct{}{c.Eq: {}}, nil
			},
		}, nil
	case *managerpb.IdFilter_Neq:
		return compiledFilter{match: func(id string, _ *managerpb.Job) bool { return id != c.Neq }}, nil
	case *managerpb.IdFilter_Re:
		re, err := compileRegexp(i, "id_filter.re", c.Re)
		if err != nil {
			return compiledFilter{}, err
		}
		return compiledFilter{
			match: func(id string, _ *managerpb.Job) bool { return re.MatchString(id) },
			candidates: func(r *Reader) (map[string]struct{}, error) {
				// The job-state index holds every job id exactly once and is
				// keys only: cheaper than walking the records.
				return r.idSet([]byte(ixJobState), func(rest []byte) (string, bool) {
					id := string(rest[1:])
					return id, re.MatchString(id)
				})
			},
		}, nil
	}
	return compiledFilter{}, &FilterError{Index: i, Field: "id_filter", Reason: "no comparison: set one of eq, neq, re"}
}

func compileDate(i int, f *managerpb.DateFilter) (compiledFilter, error) {
	check := func(field string, ts *timestamppb.Timestamp) error {
		if ts == nil {
			return &FilterError{Index: i, Field: "date_filter." + field, Reason: "timestamp is not set"}
		}
		if err := ts.CheckValid(); err != nil {
			return &FilterError{Index: i, Field: "date_filter." + field, Reason: err.Error()}
		}
		return nil
	}
	var lo, hi *timestamppb.Timestamp // bounds; nil = unbounded
	var loStrict, hiStrict bool
	var field string
	switch c := f.GetComparison().(type) {
	case *managerpb.DateFilter_Eq:
		lo, hi, field = c.Eq, c.Eq, "eq"
	case *managerpb.DateFilter_Lt:
		hi, hiStrict, field = c.Lt, true, "lt"
	case *managerpb.DateFilter_Lte:
		hi, field = c.Lte, "lte"
	case *managerpb.DateFilter_Gt:
		lo, loStrict, field = c.Gt, true, "gt"
	case *managerpb.DateFilter_Gte:
		lo, field = c.Gte, "gte"
	case *managerpb.DateFilter_Within_:
		if err := check("within.start_date", c.Within.GetStartDate()); err != nil {
			return compiledFilter{}, err
		}
		if err := check("within.end_date", c.Within.GetEndDate()); err != nil {
			return compiledFilter{}, err
		}
		lo, hi = c.Within.GetStartDate(), c.Within.GetEndDate()
		if bytes.Compare(timeKey(hi), timeKey(lo)) < 0 {
			return compiledFilter{}, &FilterError{Index: i, Field: "date_filter.within", Reason: "end_date is before start_date"}
		}
	default:
		return compiledFilter{}, &FilterError{Index: i, Field: "date_filter", Reason: "no comparison: set one of eq, lt, lte, gt, gte, within"}
	}
	if field != "" {
		ts := lo
		if ts == nil {
			ts = hi
		}
		if err := check(field, ts); err != nil {
			return compiledFilter{}, err
		}
	}
	var loKey, hiKey []byte
	if lo != nil {
		loKey = timeKey(lo)
	}
	if hi != nil {
		hiKey = timeKey(hi)
	}
	inRange := func(k []byte) bool {
		if loKey != nil {
			if c := bytes.Compare(k, loKey); c < 0 || loStrict && c == 0 {
				return false
			}
		}
		if hiKey != nil {
			if c := bytes.Compare(k, hiKey); c > 0 || hiStrict && c == 0 {
				return false
			}
		}
		return true
	}
	return compiledFilter{
		match: func(_ string, j *managerpb.Job) bool { return inRange(timeKey(j.GetStartDateTime())) },
		candidates: func(r *Reader) (map[string]struct{}, error) {
			return r.startRange(loKey, hiKey, inRange)
		},
	}, nil
}

// idSet collects ids from the keys under prefix; pick returns the id of a
// key remainder and whether it belongs to the set.
func (r *Reader) idSet(prefix []byte, pick func(rest []byte) (string, bool)) (map[string]struct{}, error) {
	set := map[string]struct{}{}
	err := r.scanKeys(prefix, func(rest []byte) error {
		if id, ok := pick(rest); ok {
			set[id] = struct{}{}
		}
		return nil
	})
	return set, err
}

// startRange collects the ids of jobs whose start time key lies in [lo, hi]
// (nil bounds are open) and satisfies keep.
func (r *Reader) startRange(lo, hi []byte, keep func(k []byte) bool) (map[string]struct{}, error) {
	prefix := []byte(ixJobStart)
	start := append(slices.Clone(prefix), lo...)
	set := map[string]struct{}{}
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) < timeKeyLen {
			return nil, fmt.Errorf("malformed start index key: %w", ErrCorrupt)
		}
		if hi != nil && bytes.Compare(k[:timeKeyLen], hi) > 0 {
			break
		}
		if keep(k[:timeKeyLen]) {
			set[string(k[timeKeyLen:])] = struct{}{}
		}
	}
	return set, nil
}

// SearchJobs calls fn for every job matching q, in job-id order, all from
// this one read.
func (r *Reader) SearchJobs(q *JobQuery, fn func(*internalpb.JobRecord) error) error {
	ids, err := r.SearchJobIDs(q)
	if err != nil {
		return err
	}
	_, err = r.MatchJobs(q, ids, func(rec *internalpb.JobRecord) (bool, error) { return true, fn(rec) })
	return err
}

// SearchJobIDs returns, sorted, the ids of the jobs that may match q: the
// intersection of its filters' index candidates (every job id when no
// filter narrows the search). Only ids are read (key-only index scans);
// MatchJobs loads the records and checks them against every filter. The two
// may run in different reads: a job deleted in between is skipped, one
// changed in between is checked as MatchJobs reads it, one created in
// between is not in the list.
func (r *Reader) SearchJobIDs(q *JobQuery) ([]string, error) {
	var cands map[string]struct{}
	for _, f := range q.filters {
		if f.candidates == nil {
			continue
		}
		set, err := f.candidates(r)
		if err != nil {
			return nil, err
		}
		cands = intersect(cands, set)
		if len(cands) == 0 {
			return nil, nil
		}
	}
	var ids []string
	if cands == nil {
		if err := r.scanKeys([]byte(ixJobState), func(rest []byte) error {
			ids = append(ids, string(rest[1:]))
			return nil
		}); err != nil {
			return nil, err
		}
	} else {
		ids = make([]string, 0, len(cands))
		for id := range cands {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// MatchJobs loads the jobs of ids in order and calls fn with each that
// matches every filter of q (ids missing are skipped), until fn answers
// false or an error. It returns how many ids it consumed: after fn answers
// false, the ids before and including that job's.
func (r *Reader) MatchJobs(q *JobQuery, ids []string, fn func(*internalpb.JobRecord) (more bool, err error)) (int, error) {
	for i, id := range ids {
		rec, _, err := r.Job(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return i, err
		}
		if !q.matches(id, rec.GetJob().GetJob()) {
			continue
		}
		more, err := fn(rec)
		if err != nil {
			return i, err
		}
		if !more {
			return i + 1, nil
		}
	}
	return len(ids), nil
}

func (q *JobQuery) matches(id string, job *managerpb.Job) bool {
	for _, f := range q.filters {
		if !f.match(id, job) {
			return false
		}
	}
	return true
}

// intersect returns a ∩ b; a nil a means "everything".
func intersect(a, b map[string]struct{}) map[string]struct{} {
	if a == nil {
		return b
	}
	if len(b) < len(a) {
		a, b = b, a
	}
	out := make(map[string]struct{}, len(a))
	for k := range a {
		if _, ok := b[k]; ok {
			out[k] = struct{}{}
		}
	}
	return out
}

// TimeKey returns the index encoding of t, for DuePreJobs.
func TimeKey(t time.Time) []byte { return timeKey(timestamppb.New(t)) }
