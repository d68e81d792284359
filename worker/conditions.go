package worker

import (
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ConditionReporter is implemented by runtimes that depend on something
// that can fail on its own, such as the Docker runtime's engine. The agent
// sends Conditions in every hello and health message
// (runtime_conditions), so that the manager can show them (ListNodes,
// norsk-ctl node list). A runtime whose dependency does not work refuses
// new jobs itself (Start fails with the condition's reason).
type ConditionReporter interface {
	// Conditions returns the current state of each dependency, in a stable
	// order. It must not block on the dependency: it reports the last
	// check.
	Conditions() []RuntimeCondition
}

// RuntimeCondition is the state of one dependency of a runtime.
type RuntimeCondition struct {
	// Runtime names the dependency ("docker": the Docker engine).
	Runtime string
	// OK is whether it works now.
	OK bool
	// Reason says why not, for an operator (empty when OK).
	Reason string
	// Since is when OK last changed (the first check counts as a change).
	Since time.Time
}

// Proto returns c as a wire RuntimeCondition.
func (c RuntimeCondition) Proto() *commonpb.RuntimeCondition {
	p := &commonpb.RuntimeCondition{Runtime: c.Runtime, Ok: c.OK, Reason: c.Reason}
	if !c.Since.IsZero() {
		p.Since = timestamppb.New(c.Since)
	}
	return p
}

// runtimeConditions returns the runtime's conditions as wire messages (nil
// for a runtime that reports none).
func runtimeConditions(rt Runtime) []*commonpb.RuntimeCondition {
	cr, ok := rt.(ConditionReporter)
	if !ok {
		return nil
	}
	var out []*commonpb.RuntimeCondition
	for _, c := range cr.Conditions() {
		out = append(out, c.Proto())
	}
	return out
}
