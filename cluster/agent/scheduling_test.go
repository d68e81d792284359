package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// followSchedulingAlerts follows the event stream from its snapshot and
// returns once the snapshot is complete, so that every later change is
// seen as an event.
func followSchedulingAlerts(t *testing.T, c managerpb.ManagerClient) *alerts {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.EventStream(ctx, &managerpb.EventStreamRequest{})
	require.NoError(t, err)
	for {
		ev, err := s.Recv()
		require.NoError(t, err)
		if ev.GetInitialDataComplete() != nil {
			break
		}
	}
	a := &alerts{}
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				return
			}
			if na := ev.GetNodeAlert(); na != nil {
				a.mu.Lock()
				a.got = append(a.got, na)
				a.mu.Unlock()
			}
		}
	}()
	return a
}

// schedulingKinds returns the kinds of the cordon, drain and uncordon
// alerts a has collected, in stream order.
func (a *alerts) schedulingKinds() []managerpb.NodeAlert_Kind {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []managerpb.NodeAlert_Kind
	for _, na := range a.got {
		switch na.GetKind() {
		case managerpb.NodeAlert_CORDONED, managerpb.NodeAlert_DRAINING, managerpb.NodeAlert_UNCORDONED:
			out = append(out, na.GetKind())
		}
	}
	return out
}

// TestNodeScheduling_TransitionsAndIdempotence: cordon, drain, cordon (the
// drain stops) and uncordon move a started node through its scheduling
// states, each with who, when and why in ListNodes and one node_alert; a
// repeated command answers OK and writes nothing (no second alert, the
// first reason kept). The state survives a restart of the manager.
func TestNodeScheduling_TransitionsAndIdempotence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, c := startAgent(t, dir)
	id, _ := registerWorker(t, c, "w1")
	al := followSchedulingAlerts(t, c)
	nid := &commonpb.NodeId{NodeId: id}
	sched := func() *managerpb.NodeSchedulingState { return nodeInfo(t, c, id).GetScheduling() }
	require.Nil(t, sched(), "a new node is eligible, never changed")

	steps := []struct {
		name   string
		call   func() error
		want   managerpb.NodeScheduling
		reason string
	}{
		{"cordon", func() error {
			_, err := c.CordonNode(ctx, &managerpb.CordonNodeRequest{NodeId: nid, Reason: "disk swap"})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "disk swap"},
		{"cordon again keeps the first reason", func() error {
			_, err := c.CordonNode(ctx, &managerpb.CordonNodeRequest{NodeId: nid, Reason: "other"})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "disk swap"},
		{"drain", func() error {
			_, err := c.DrainNode(ctx, &managerpb.DrainNodeRequest{NodeId: nid, Reason: "kernel update"})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "kernel update"},
		{"drain again", func() error {
			_, err := c.DrainNode(ctx, &managerpb.DrainNodeRequest{NodeId: nid})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "kernel update"},
		{"cordon stops the drain", func() error {
			_, err := c.CordonNode(ctx, &managerpb.CordonNodeRequest{NodeId: nid})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, ""},
		{"uncordon", func() error { _, err := c.UncordonNode(ctx, nid); return err }, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, ""},
		{"uncordon again", func() error { _, err := c.UncordonNode(ctx, nid); return err }, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, ""},
		{"drain from eligible", func() error {
			_, err := c.DrainNode(ctx, &managerpb.DrainNodeRequest{NodeId: nid, Reason: "decommission"})
			return err
		}, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "decommission"},
	}
	for _, s := range steps {
		require.NoError(t, s.call(), s.name)
		got := sched()
		require.Equal(t, s.want, got.GetState(), s.name)
		require.Equal(t, s.reason, got.GetReason(), s.name)
		require.True(t, strings.HasPrefix(got.GetRequestedBy(), "127.0.0.1:"), "%s: requested_by %q", s.name, got.GetRequestedBy())
		require.NotNil(t, got.GetSince(), s.name)
	}
	want := []managerpb.NodeAlert_Kind{managerpb.NodeAlert_CORDONED, managerpb.NodeAlert_DRAINING, managerpb.NodeAlert_CORDONED,
		managerpb.NodeAlert_UNCORDONED, managerpb.NodeAlert_DRAINING}
	// The alerts arrive in log order; the last one's arrival means every
	// earlier one has been seen, so a repeated command's alert would show.
	eventually(t, "five scheduling alerts", func() bool { return len(al.schedulingKinds()) >= len(want) })
	require.Equal(t, want, al.schedulingKinds(), "one alert per change, none for a repeat")
	before := sched()

	a.Shutdown()
	_, c = startAgent(t, dir)
	after := nodeInfo(t, c, id).GetScheduling()
	require.Equal(t, before.String(), after.String(), "the scheduling state survives a restart")
}

// TestNodeScheduling_Refusals: a bad node id or reason is refused with
// InvalidArgument naming the field, an unknown node with NotFound, a
// terminated node with FailedPrecondition; none of them changes anything.
func TestNodeScheduling_Refusals(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	live, _ := registerWorker(t, c, "live")
	gone, _ := registerWorker(t, c, "gone")
	_, err := c.TerminateNode(ctx, &commonpb.NodeId{NodeId: gone})
	require.NoError(t, err)
	nid := func(s string) *commonpb.NodeId { return &commonpb.NodeId{NodeId: s} }
	cordon := func(node, reason string) func() error {
		return func() error {
			_, err := c.CordonNode(ctx, &managerpb.CordonNodeRequest{NodeId: nid(node), Reason: reason})
			return err
		}
	}
	drain := func(node, reason string) func() error {
		return func() error {
			_, err := c.DrainNode(ctx, &managerpb.DrainNodeRequest{NodeId: nid(node), Reason: reason})
			return err
		}
	}
	uncordon := func(node string) func() error {
		return func() error { _, err := c.UncordonNode(ctx, nid(node)); return err }
	}
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"cordon without node id", cordon("", "x"), codes.InvalidArgument, "node_id"},
		{"drain without node id", drain("", ""), codes.InvalidArgument, "node_id"},
		{"uncordon without node id", uncordon(""), codes.InvalidArgument, "node_id"},
		{"node id with slash", cordon("a/b", ""), codes.InvalidArgument, "node_id"},
		{"reason with a newline", cordon(live, "line\nbreak"), codes.InvalidArgument, "reason"},
		{"reason too long", drain(live, strings.Repeat("r", 1025)), codes.InvalidArgument, "reason"},
		{"cordon unknown node", cordon("ghost", ""), codes.NotFound, "ghost"},
		{"drain unknown node", drain("ghost", ""), codes.NotFound, "ghost"},
		{"uncordon unknown node", uncordon("ghost"), codes.NotFound, "ghost"},
		{"cordon terminated node", cordon(gone, ""), codes.FailedPrecondition, "terminated"},
		{"drain terminated node", drain(gone, ""), codes.FailedPrecondition, "terminated"},
		{"uncordon terminated node", uncordon(gone), codes.FailedPrecondition, "terminated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireCode(t, tc.call(), tc.code, tc.msg)
			for _, n := range []string{live, gone} {
				require.Nil(t, nodeInfo(t, c, n).GetScheduling(), "a refused request changes nothing")
			}
		})
	}
}
