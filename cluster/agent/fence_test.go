package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// acks returns the health_ack seqs w received, in order.
func (w *fakeWorker) acks() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []uint64
	for _, m := range w.received {
		if a := m.GetHealthAck(); a != nil {
			out = append(out, a.GetSeq())
		}
	}
	return out
}

// TestNode_HealthAcks (docs/design/worker-sessions.md §8): the node grain
// answers a health with a seq by health_ack{seq} while its session is
// healthy, and a health without one (a worker that predates the fence)
// with nothing.
func TestNode_HealthAcks(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	node, w := registerWorker(t, c, "w")
	// A manual start: its provision_job reaches the worker after any ack
	// of the healths the grain read before it (one stream, in order).
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: oneService()})
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "provision received", func() bool { return w.isRunning("j", "primary") })
	require.Empty(t, w.acks(), "a health without seq was acknowledged")
	w.mu.Lock()
	fence := w.running[[2]string{"j", "primary"}].GetFence()
	w.mu.Unlock()
	require.Nil(t, fence, "a manual start is fenced")

	w.healthSeq.Store(true)
	eventually(t, "healths with seq acknowledged", func() bool { return len(w.acks()) >= 3 })
	acks := w.acks()
	for i, s := range acks {
		require.NotZero(t, s)
		require.LessOrEqual(t, s, w.seq.Load())
		if i > 0 {
			require.Greater(t, s, acks[i-1], "acks out of order: %v", acks)
		}
	}
}
