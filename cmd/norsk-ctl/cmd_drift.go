package main

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// updateStrategyText renders a job's or bundle's update_strategy for
// "job get" / "bundle get": what an update does to running instances.
func updateStrategyText(s managerpb.UpdateStrategy) string {
	switch s {
	case managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE:
		return "in place (running instances keep their definition until restarted)"
	case managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE:
		return "migrate (running instances are moved to the new definition, make-before-break)"
	}
	return s.String() // a newer manager's value
}

// driftNote is what "job get" adds to an instance line when the instance
// runs another definition than the job's current one (RunningJob
// definition_stale), else "": what applies the current one — under
// UPDATE_STRATEGY_MIGRATE the placement engine's rolling update, else a
// restart or a move.
func driftNote(job *managerpb.Job, rj *managerpb.RunningJob) string {
	if !rj.GetDefinitionStale() {
		return ""
	}
	return fmt.Sprintf(": runs definition hash %d; current %d: %s", rj.GetDefinitionHash(), job.GetCurrentHash(), driftApply(job.GetUpdateStrategy()))
}

// bundleDriftNote is what "bundle get" adds to a derived job's status
// when its instance runs a stale definition, else "" (s: the bundle's
// update strategy).
func bundleDriftNote(s managerpb.UpdateStrategy, j *managerpb.BundleJobStatus) string {
	if !j.GetDefinitionStale() {
		return ""
	}
	return ", runs a stale definition (" + driftApply(s) + ")"
}

// driftApply says what brings a stale instance to the current definition
// under update strategy s.
func driftApply(s managerpb.UpdateStrategy) string {
	if s == managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE {
		return "rolling update in progress"
	}
	return "restart or migrate to apply"
}
