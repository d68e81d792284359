package job

import (
	"fmt"
	"hash/fnv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Definition drift (docs/design/jobs.md "Definition drift"): every
// instance records the definition its StartJob provisioned it with —
// the job's current_hash then (Instance.definition_hash) and the RunHash
// of that definition (Instance.run_hash). An UpdateJob stores a new
// definition and, under UPDATE_STRATEGY_IN_PLACE, leaves running
// instances as they are: they are stale until a restart or a move. An
// update that changes nothing the worker runs (requirements, update
// strategy, description, tags…) carries the instances' definition_hash
// forward, so that they are not reported stale for it.

// definition is what one start sends a worker, as recorded on the
// Instance it provisions.
type definition struct {
	hash int64 // the job's current_hash
	run  int64 // RunHash of the job
}

// definitionOf returns the definition a start of j sends.
func definitionOf(j *managerpb.Job) definition {
	return definition{hash: j.GetCurrentHash(), run: RunHash(j)}
}

// RunHash returns a hash of the part of j a worker runs: the WorkerJob a
// start sends, without the role and instance id (per instance), the
// placement engine's core assignment (per instance) and the fields no
// worker runtime reads (description, tags, start_date_time: bookkeeping
// of the manager and its clients). Two definitions with the same RunHash
// run the same thing; one the worker runs is not stale when only the
// other fields change. Never 0 (0 means unknown on an Instance).
func RunHash(j *managerpb.Job) int64 {
	wj := WorkerJob(j, "")
	wj.Description, wj.Tags, wj.StartDateTime = "", nil, nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(wj)
	if err != nil {
		panic("job: marshal for run hash: " + err.Error()) // a valid message always marshals
	}
	h := fnv.New64a()
	h.Write([]byte("run\x00"))
	h.Write(b)
	if v := int64(h.Sum64()); v != 0 {
		return v
	}
	return 1
}

// Stale reports whether in runs another definition than j, the job's
// current one: its recorded definition is known, is not j's current
// hash and does not run the same thing (RunHash). An instance with an
// unknown definition (0: recorded before the manager kept it, or adopted)
// is never stale. Cheap when the hashes are equal (no RunHash computed).
func Stale(j *managerpb.Job, in *internalpb.Instance) bool {
	if in.GetDefinitionHash() == 0 || in.GetRunHash() == 0 || in.GetDefinitionHash() == j.GetCurrentHash() {
		return false
	}
	return in.GetRunHash() != RunHash(j)
}

// recordDefinition sets on in the definition d it was provisioned with,
// carried forward to j (the job's definition now) when d runs the same
// thing as j: a start whose provision crossed an UpdateJob that changed
// nothing the worker runs.
func recordDefinition(in *internalpb.Instance, d definition, j *managerpb.Job) {
	in.DefinitionHash, in.RunHash = d.hash, d.run
	if d.hash != 0 && d.hash != j.GetCurrentHash() && d.run == RunHash(j) {
		in.DefinitionHash = j.GetCurrentHash()
	}
}

// carryDefinitions advances, after an UpdateJob to j, the definition_hash
// of each instance of rec whose run_hash is j's (the update changed
// nothing it runs). Others keep theirs: they are stale (Stale). It
// returns how many instances are left stale.
func carryDefinitions(rec *internalpb.JobRecord, j *managerpb.Job) (stale int) {
	run := RunHash(j)
	for _, in := range rec.GetInstances() {
		switch {
		case in.GetRunHash() == 0:
		case in.GetRunHash() == run:
			in.DefinitionHash = j.GetCurrentHash()
		default:
			stale++
		}
	}
	return stale
}

// forgetDefinition clears the recorded definition of in when the worker
// reports it running under reported, another instance id than the one
// recorded (the provision found an earlier instance of the role running
// and kept it): what that one runs is unknown. Call it before the record
// takes the reported id.
func forgetDefinition(in *internalpb.Instance, reported string) {
	if reported != "" && in.GetInstanceId() != "" && reported != in.GetInstanceId() {
		in.DefinitionHash, in.RunHash = 0, 0
	}
}

// driftEvent is the definition_drift event of an UpdateJob that left
// instances of rec (the record it commits) on an older definition, or
// nil if it left none: one event per such update, in its commit.
func driftEvent(rec *internalpb.JobRecord) *managerpb.EventStreamEvent {
	j := rec.GetJob().GetJob()
	var stale []*managerpb.RunningJob
	var parts []string
	for _, rj := range RunningJobs(rec) {
		if rj.GetDefinitionStale() {
			stale = append(stale, rj)
			parts = append(parts, fmt.Sprintf("%s on node %s runs definition hash %d", rj.GetJobKey().GetRole(), rj.GetNodeId().GetNodeId(), rj.GetDefinitionHash()))
		}
	}
	if len(stale) == 0 {
		return nil
	}
	apply := "restart or migrate to apply"
	if j.GetUpdateStrategy() == managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE {
		apply = "rolling update: the placement engine moves them to the current definition, make-before-break"
	}
	msg := fmt.Sprintf("job %s: %s; current %d: %s", j.GetJobId().GetJobId(), strings.Join(parts, ", "), j.GetCurrentHash(), apply)
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_DefinitionDrift{DefinitionDrift: &managerpb.DefinitionDrift{
		JobId: j.GetJobId(), CurrentHash: j.GetCurrentHash(), UpdateStrategy: j.GetUpdateStrategy(), Instances: stale, Message: msg}}}
}
