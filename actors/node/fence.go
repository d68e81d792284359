package node

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// The node grain's part of the worker fence (docs/design/worker-sessions.md
// §8): it acknowledges the worker's health only while it holds the session
// healthy, and tells the worker, in every fenced provision, how long after
// such an acknowledgement the managers may start another copy of a job
// (LostTimeout: a node is declared lost only after LostTimeout without a
// healthy session, and only then do its jobs move).

// ackHealth answers a health with a seq (a worker that fences) with
// health_ack. Call only while g.healthy: the acknowledgement promises that
// this node is not declared lost within LostTimeout of the health's send.
func (g *grain) ackHealth(h *workerpb.Health) {
	if h.GetSeq() == 0 || !g.healthy {
		return
	}
	g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_HealthAck{
		HealthAck: &workerpb.WorkerHealthAck{Seq: h.GetSeq()}}})
}

// provisionMessage is the provision_job of job: a fenced job (the placement
// engine set WorkerJob.fence) gets replace_after_ms, this manager's
// LostTimeout; job itself is not modified (it belongs to the sender).
func (g *grain) provisionMessage(job *workerpb.WorkerJob) *workerpb.NodeControllerMessage {
	if job.GetFence() != nil {
		job = proto.Clone(job).(*workerpb.WorkerJob)
		job.Fence.ReplaceAfterMs = uint32(min(g.cfg.LostTimeout.Milliseconds(), 1<<31))
	}
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_ProvisionJob{ProvisionJob: job}}
}
