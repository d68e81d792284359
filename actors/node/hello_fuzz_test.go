package node

import (
	"log/slog"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// FuzzWorkerHello feeds the first message of a worker session, as a
// process on the worker's port could send it, to what the node grain does
// with it before it trusts the session: the credential proof check
// (verifyHello) and the intake of the reported resources (takeResources).
// Neither may panic; a hello is accepted only with the proof computed from
// the slot's credential, this node's id and this session's nonce; and
// resources are taken only when they pass noderesources.Validate.
func FuzzWorkerHello(f *testing.F) {
	const (
		nodeID = "7c1e0f5a-node"
		cred   = "node-credential-secret"
		nonce  = "manager-nonce-1"
	)
	good := workerauth.WorkerProof(cred, nodeID, nonce)
	for _, h := range []*workerpb.WorkerHello{
		{Token: &workerpb.WorkerAuthenticationToken{InstanceId: nodeID, Cookie: good, Signature: &commonpb.OptionalString{Value: "worker-nonce"}},
			NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: nodeID}},
			RunningJobs:  []*workerpb.WorkerRunningJob{{Job: &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j1"}, Role: "primary", InstanceId: "i1"}}},
			Resources:    &commonpb.NodeResources{Capacity: 10, Capabilities: map[string]string{"nvenc": "2"}}},
		{Token: &workerpb.WorkerAuthenticationToken{InstanceId: nodeID, Cookie: good},
			Resources: &commonpb.NodeResources{Capacity: 2, Templates: []*commonpb.ProductTemplateOffer{
				{Name: "hello", Versions: []string{"1.0", "1.1"}}, {Name: "ingest", Versions: []string{"2"}}}}},
		{Token: &workerpb.WorkerAuthenticationToken{InstanceId: "other", Cookie: good}},
		{},
	} {
		b, err := proto.Marshal(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, mock bool) {
		var h workerpb.WorkerHello
		if proto.Unmarshal(data, &h) != nil {
			return
		}
		provider := managerpb.NodeProvider_NODE_PROVIDER_CLUSTER
		if mock {
			provider = managerpb.NodeProvider_NODE_PROVIDER_MOCK
		}
		g := &grain{id: nodeID, log: slog.New(slog.DiscardHandler), pendingNonce: nonce,
			rec: &internalpb.NodeRecord{Provider: provider, Credential: cred}}
		err := g.verifyHello(&h)
		if id := h.GetNodeMetadata().GetNodeId().GetNodeId(); err == nil && id != "" && id != nodeID {
			t.Fatalf("accepted a hello of node %q on node %q", id, nodeID)
		}
		if err == nil && !mock && (h.GetToken().GetCookie() != good || h.GetToken().GetInstanceId() != nodeID) {
			t.Fatalf("accepted a hello without the proof: %v", h.GetToken())
		}
		next := &internalpb.NodeRecord{}
		g.takeResources(next, h.GetResources())
		if next.GetResources() != nil && noderesources.Validate(next.GetResources()) != nil {
			t.Fatalf("took resources that do not validate: %v", next.GetResources())
		}
	})
}
