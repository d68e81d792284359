package gateway

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// checkUpdateStrategy refuses an update_strategy value this manager does
// not know (a newer client's, or a number sent raw): InvalidArgument
// naming field.
func checkUpdateStrategy(field string, s managerpb.UpdateStrategy) error {
	if _, known := managerpb.UpdateStrategy_name[int32(s)]; !known {
		return invalid(field, "%d is not an update strategy (UPDATE_STRATEGY_IN_PLACE or UPDATE_STRATEGY_MIGRATE)", s)
	}
	return nil
}

// validateJobUpdateStrategy checks a job's update_strategy: a known value,
// and UPDATE_STRATEGY_MIGRATE only with auto_placement, since the placement
// engine carries out the moves of a rolling update (docs/design/jobs.md,
// "Definition drift"). A rule that can be relaxed later: allowing more
// is compatible, refusing what was stored is not.
func validateJobUpdateStrategy(j *managerpb.Job) error {
	if err := checkUpdateStrategy("job.update_strategy", j.GetUpdateStrategy()); err != nil {
		return err
	}
	if j.GetUpdateStrategy() == managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE && j.GetAutoPlacement() == nil {
		return invalid("job.update_strategy", "UPDATE_STRATEGY_MIGRATE needs auto_placement: the placement engine moves the running instances "+
			"to the new definition; a job placed by hand is restarted by hand (StopJob, then StartJob)")
	}
	return nil
}

// bundleTemplate returns the job template t of a bundle job spec f as
// validateJob should see it, or an error if its update_strategy is set
// and not the bundle's (b): the bundle's is stamped into every derived
// job, so a different one in the template would be ignored in silence.
// A template whose own is set comes back as a copy without it (the
// derived job gets auto_placement and the bundle's strategy).
func bundleTemplate(f string, b *managerpb.Bundle, t *managerpb.Job) (*managerpb.Job, error) {
	s := t.GetUpdateStrategy()
	if s == managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE {
		return t, nil
	}
	if s != b.GetUpdateStrategy() {
		return nil, invalid(f+".job.update_strategy", "is %s but the bundle's is %s: set update_strategy on the bundle "+
			"(it applies to every derived job) and leave the template's unset", s, b.GetUpdateStrategy())
	}
	t = proto.Clone(t).(*managerpb.Job)
	t.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE
	return t, nil
}
