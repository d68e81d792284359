package node

import (
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// takeResources puts what a worker's hello says it offers (its --capacity,
// --zone… flags) into next, the record about to be committed with the
// session, replacing what was stored: a worker restarted with new flags
// updates the node at its next session. A hello without resources (a
// worker that predates them) keeps the stored value; one that breaks the
// rules of noderesources.Validate is ignored with a warning (the session
// is not refused for it: the jobs the worker runs matter more).
func (g *grain) takeResources(next *internalpb.NodeRecord, r *commonpb.NodeResources) {
	if r == nil {
		return
	}
	if err := noderesources.Validate(r); err != nil {
		g.log.Warn("ignoring the resources the worker reported; keeping the stored ones", "error", err)
		return
	}
	next.Resources = r
}

// Zone is the failure domain of the node rec describes
// (noderesources.Zone): an OCI node's availability domain, else its
// worker's --zone, else its "zone" tag; "" if unknown.
func Zone(rec *internalpb.NodeRecord) string {
	var ociAD string
	if oci := rec.GetCloud().GetOci(); oci != nil {
		ociAD = oci.GetAvailabilityDomain()
	}
	return noderesources.Zone(rec.GetProvider(), ociAD, rec.GetResources().GetZone(), rec.GetMetadata().GetTags())
}
