package job

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// Instance ids (docs/design/jobs.md "Instance ids"): every start attempt of
// (job, role) gets an id, sent to the worker in the provision
// (WorkerJob.instance_id), recorded on the Instance, and echoed by the
// worker in job_started, job_failed, job_stopped and hello's running_jobs.
// They tell the instances of one (job, role) apart: a report of an earlier
// instance that arrives late (its job_stopped overtaken by the next
// StartJob) is not taken for the current one. An empty id is unknown — a
// worker or a record from before instance ids — and reports about it follow
// the rules of (job, role, node) alone.

// pendingStart is a StartJob waiting for its node grain's answer.
type pendingStart struct {
	node string
	// instance is the id minted for this attempt (never empty).
	instance string
	// cpus are the core ids sent as the provision's norsk_cpu_list
	// (startCPUs), recorded on the Instance; empty: not pinned.
	cpus []uint32
	// note is the placement engine's note of the StartJob (nil: by hand),
	// kept on the instance whichever path records it.
	note *internalpb.PlacementNote
	// def is the definition the provision sends (drift.go), recorded on
	// the Instance.
	def definition
}

// newInstanceID returns the id of the instance a StartJob provisions: 32
// hex digits derived from the job id, role and the command's request id,
// so that a retried StartJob (protoactor's at-least-once delivery, a
// client's or a bundle's retry with the same request id) provisions the
// same instance; random (workerauth.NewNonce) when the command has no
// request id.
func newInstanceID(job, role, reqID string) string {
	if reqID == "" {
		return workerauth.NewNonce()
	}
	sum := sha256.Sum256([]byte("norsk-instance\x00" + job + "\x00" + role + "\x00" + reqID))
	return hex.EncodeToString(sum[:16])
}

// otherInstance reports whether r, a STOPPED or FAILED report, is about an
// instance other than the one this grain has recorded on r's node or is
// starting there: both ids are known and differ. Such a report is late (an
// earlier instance's end, or the answer to a repeated stop of it) and
// changes nothing. MISSING reports name no instance and never match.
func (g *grain) otherInstance(r *internalpb.InstanceReport) (current string, other bool) {
	id := r.GetInstanceId()
	if id == "" || r.GetKind() == internalpb.InstanceReport_MISSING {
		return "", false
	}
	if i := instanceIndex(g.rec, r.GetRole()); i >= 0 {
		in := g.rec.GetInstances()[i]
		if in.GetNodeId() == r.GetNodeId() {
			return in.GetInstanceId(), in.GetInstanceId() != "" && in.GetInstanceId() != id
		}
		return "", false
	}
	if p, ok := g.pending[r.GetRole()]; ok && p.node == r.GetNodeId() {
		return p.instance, p.instance != id
	}
	return "", false
}

// adoptID returns the id to record for an instance the worker reports
// running: the reported one, or recorded when the report names none (an
// old worker).
func adoptID(recorded, reported string) string {
	if reported != "" {
		return reported
	}
	return recorded
}
