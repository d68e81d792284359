package gateway

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Bundle limits (docs/design/bundles.md).
const (
	maxBundleIDLen = 128
	maxJobNameLen  = 64
	maxBundleJobs  = 64
	// maxBundleBytes bounds a bundle's encoding: its record (the bundle
	// and the state of up to 128 derived jobs) must fit one append.
	maxBundleBytes = 1 << 20
)

var (
	bundleIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	jobNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
)

// checkBundleID validates a bundle id: 1-128 bytes of [A-Za-z0-9._-],
// starting with a letter or digit.
func checkBundleID(field, id string) error {
	switch {
	case id == "":
		return invalid(field, "must not be empty")
	case len(id) > maxBundleIDLen:
		return invalid(field, "is %d bytes long, the limit is %d", len(id), maxBundleIDLen)
	case !bundleIDRe.MatchString(id):
		return invalid(field, "%q must be letters, digits, '.', '_' or '-', starting with a letter or digit", id)
	}
	return nil
}

// checkJobName validates a bundle job name: 1-64 bytes of [A-Za-z0-9_-],
// starting with a letter or digit (it is part of derived job ids).
func checkJobName(field, name string) error {
	switch {
	case name == "":
		return invalid(field, "must not be empty")
	case len(name) > maxJobNameLen:
		return invalid(field, "is %d bytes long, the limit is %d", len(name), maxJobNameLen)
	case !jobNameRe.MatchString(name):
		return invalid(field, "%q must be letters, digits, '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// validateBundle checks a bundle of CreateBundle/UpdateBundle whose id is
// set. Errors are InvalidArgument naming the field ("bundle.jobs[2].job_name").
func validateBundle(b *managerpb.Bundle) error {
	if err := checkBundleID("bundle.bundle_id", b.GetBundleId().GetBundleId()); err != nil {
		return err
	}
	if n := proto.Size(b); n > maxBundleBytes {
		return invalid("bundle", "is %d bytes encoded; the limit is %d (1 MiB)", n, maxBundleBytes)
	}
	if p := b.GetPool(); p != "" {
		if err := checkPoolName("bundle.pool", p); err != nil {
			return err
		}
	}
	if p := b.GetResiliencePolicy().GetPool(); p != "" {
		if err := checkPoolName("bundle.resilience_policy.pool", p); err != nil {
			return err
		}
	}
	jobs := b.GetJobs()
	if len(jobs) == 0 || len(jobs) > maxBundleJobs {
		return invalid("bundle.jobs", "has %d jobs; a bundle has 1 to %d", len(jobs), maxBundleJobs)
	}
	index := map[string]int{}
	for i, j := range jobs {
		f := fmt.Sprintf("bundle.jobs[%d]", i)
		if err := checkJobName(f+".job_name", j.GetJobName()); err != nil {
			return err
		}
		if k, dup := index[j.GetJobName()]; dup {
			return invalid(f+".job_name", "duplicate job name %q (also jobs[%d])", j.GetJobName(), k)
		}
		index[j.GetJobName()] = i
	}
	if err := checkUpdateStrategy("bundle.update_strategy", b.GetUpdateStrategy()); err != nil {
		return err
	}
	for i, j := range jobs {
		if err := validateBundleJob(fmt.Sprintf("bundle.jobs[%d]", i), b, j, index); err != nil {
			return err
		}
	}
	return checkPlacementRules(jobs, index)
}

// validateBundleJob checks one job spec of b (names in index are the bundle's).
func validateBundleJob(f string, b *managerpb.Bundle, j *managerpb.BundleJobSpec, index map[string]int) error {
	switch j.GetStartMode() {
	case "", bundle.StartModeAuto, bundle.StartModeManual:
	default:
		return invalid(f+".start_mode", "%q is not a start mode (\"auto\", \"manual\" or empty)", j.GetStartMode())
	}
	for _, rule := range []struct {
		name  string
		names []string
	}{{"co_locate_with", j.GetCoLocateWith()}, {"separate_from", j.GetSeparateFrom()}} {
		for k, n := range rule.names {
			switch _, known := index[n]; {
			case !known:
				return invalid(fmt.Sprintf("%s.%s[%d]", f, rule.name, k), "unknown job name %q", n)
			case n == j.GetJobName():
				return invalid(fmt.Sprintf("%s.%s[%d]", f, rule.name, k), "names the job itself")
			}
		}
	}
	if err := validateRequirements(f+".requirements", j.GetRequirements()); err != nil {
		return err
	}
	if t := j.GetJob(); t != nil {
		t, err := bundleTemplate(f, b, t)
		if err != nil {
			return err
		}
		if err := validateJob(t); err != nil {
			return prefixField(err, f+".")
		}
		if len(t.GetNorskCpuList()) > 0 {
			return invalid(f+".job.norsk_cpu_list", "cannot be set on a bundle job: the placement engine picks the node and its cores; "+
				"ask for whole cores with requirements.required_cores")
		}
		for k := range t.GetTags() {
			if bundle.IsReservedTag(k) {
				return invalid(f+".job.tags", "key %q is reserved (in any case): the manager stamps %s on derived jobs", k, strings.Join(bundle.ReservedTags(), ", "))
			}
		}
	}
	return nil
}

// checkPlacementRules refuses separate_from naming a job that co_locate_with
// puts on the same node (directly or through other jobs: co-location is
// transitive and symmetric).
func checkPlacementRules(jobs []*managerpb.BundleJobSpec, index map[string]int) error {
	group := make([]int, len(jobs)) // union-find over co_locate_with
	for i := range group {
		group[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for group[i] != i {
			group[i] = group[group[i]]
			i = group[i]
		}
		return i
	}
	for i, j := range jobs {
		for _, n := range j.GetCoLocateWith() {
			group[find(i)] = find(index[n])
		}
	}
	for i, j := range jobs {
		for k, n := range j.GetSeparateFrom() {
			if find(i) == find(index[n]) {
				return invalid(fmt.Sprintf("bundle.jobs[%d].separate_from[%d]", i, k),
					"job %q must be separated from %q, but co_locate_with puts them on the same node", j.GetJobName(), n)
			}
		}
	}
	return nil
}

// prefixField returns err (an InvalidArgument from validateJob, whose
// message starts with the field name) with prefix put before the field.
func prefixField(err error, prefix string) error {
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		return err
	}
	return status.Error(codes.InvalidArgument, prefix+st.Message())
}

// bundleJobRef validates the (bundle, replica, job name) of StartBundleJob
// and StopBundleJob.
func bundleJobRef(id *managerpb.BundleId, replica uint32, name string) (string, error) {
	if err := checkBundleID("bundle_id", id.GetBundleId()); err != nil {
		return "", err
	}
	if replica > 1 {
		return "", invalid("replica_index", "%d is not a replica (0 primary, 1 backup)", replica)
	}
	if err := checkJobName("job_name", name); err != nil {
		return "", err
	}
	return id.GetBundleId(), nil
}
