package node

import (
	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// templateRefusal answers why job cannot be provisioned on this node for
// its product template, or nil: a job without one, or one the node's
// record offers at the version asked (the catalogue its worker's last
// hello reported, NodeResources.templates). The refusal is
// FAILED_PRECONDITION naming the template, the version and what the node
// has ("node n1 has no product template hello 2.0; it has: hello (1.0)"),
// so a StartJob by hand on the wrong node changes nothing and says where
// to look; the placement engine's product_template filter never picks
// such a node (issue 14 §1). It is checked when the provision is sent to
// the worker, so a provision queued for a session being dialled is judged
// on the catalogue of that session's hello.
func (g *grain) templateRefusal(job *workerpb.WorkerJob) *internalpb.Reply {
	t := job.GetProductTemplate()
	if t == nil || t.GetName() == "" && t.GetVersion() == "" {
		return nil
	}
	res := g.rec.GetResources()
	if noderesources.OffersTemplate(res, t.GetName(), t.GetVersion()) {
		return nil
	}
	return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s has no product template %s %s; it has: %s",
		g.id, t.GetName(), t.GetVersion(), noderesources.DescribeTemplates(res.GetTemplates()))
}
