package grains

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// silent is a scripted answer: the grain does not answer at all (it is
// moving to another manager, or its manager froze).
const silent = errorpb.Code(-1)

// scriptedGrain answers each delivery of a JobCommand or NodeCommand
// (labelled by its request id) with the next code of its script, then OK; it records the
// commands it carried out (answered OK) in order.
type scriptedGrain struct {
	mu       sync.Mutex
	script   map[string][]errorpb.Code // request id → answers of its first deliveries
	attempts map[string]int            // request id → deliveries seen
	done     []string                  // request ids answered OK, in order
}

func (s *scriptedGrain) props() *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		var id string
		switch m := ctx.Message().(type) {
		case *internalpb.JobCommand:
			id = m.GetRequestId()
		case *internalpb.NodeCommand:
			id = m.GetRequestId()
		default:
			return
		}
		code := s.answer(id)
		switch code {
		case silent:
		case errorpb.Code_OK:
			ctx.Respond(actors.OK())
		default:
			ctx.Respond(actors.Fail(code, "scripted %s", code))
		}
	})
}

func (s *scriptedGrain) answer(id string) errorpb.Code {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.attempts[id]
	s.attempts[id]++
	if n < len(s.script[id]) {
		return s.script[id][n]
	}
	s.done = append(s.done, id)
	return errorpb.Code_OK
}

func (s *scriptedGrain) state() (done []string, attempts map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.done), maps.Clone(s.attempts)
}

// newTestRouter starts a one-member actor cluster hosting g as kinds job
// and node and returns a Router over it.
func newTestRouter(t *testing.T, g *scriptedGrain) *Router {
	t.Helper()
	ms := membership.TestMembership(t, "m1", nil)
	p := membership.NewProvider(ms)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	c := cluster.New(system, cluster.Configure("norsk-test", p, disthash.New(), remote.Configure("127.0.0.1", 0),
		cluster.WithKinds(cluster.NewKind(actors.KindJob, g.props()), cluster.NewKind(actors.KindNode, g.props()))))
	c.StartMember()
	r := NewRouter(c, Config{RequestTimeout: 300 * time.Millisecond, SendBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(func() {
		r.Stop()
		_ = p.Shutdown(false)
		_ = ms.Shutdown()
		c.Shutdown(false)
	})
	return r
}

// reportCmd is a job_started report labelled id.
func reportCmd(id string) *internalpb.JobCommand {
	return &internalpb.JobCommand{RequestId: id, Cmd: &internalpb.JobCommand_InstanceReport{InstanceReport: &internalpb.InstanceReport{
		Kind: internalpb.InstanceReport_STARTED, Role: "primary", NodeId: "n1", SessionEpoch: 1}}}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func (r *Router) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queues) == 0
}

// TestRouter_Send_RetriesUntilCarriedOut: a one-way command (an instance
// report) whose first deliveries reach no grain (it is moving) or a grain
// that cannot persist (no Raft leader) is delivered again until the grain
// carries it out, in order with the commands sent after it; an answer
// that is a decision (NOT_FOUND) is not retried, nor is an answered
// command that is not a report (node-gone, a node stop, a command with a
// deadline).
func TestRouter_Send_RetriesUntilCarriedOut(t *testing.T) {
	soon := timestamppb.New(time.Now().Add(time.Minute))
	tests := []struct {
		name         string
		kind         string
		cmds         []proto.Message
		script       map[string][]errorpb.Code
		wantDone     []string
		wantAttempts map[string]int
	}{
		{name: "silent, then unavailable, then carried out",
			cmds:     []proto.Message{reportCmd("started")},
			script:   map[string][]errorpb.Code{"started": {silent, errorpb.Code_UNAVAILABLE}},
			wantDone: []string{"started"}, wantAttempts: map[string]int{"started": 3}},
		{name: "aborted twice, then carried out; the next command waits its turn",
			cmds:     []proto.Message{reportCmd("started"), reportCmd("stopped")},
			script:   map[string][]errorpb.Code{"started": {errorpb.Code_ABORTED, errorpb.Code_ABORTED}},
			wantDone: []string{"started", "stopped"}, wantAttempts: map[string]int{"started": 3, "stopped": 1}},
		{name: "a decision is final",
			cmds:     []proto.Message{reportCmd("report")},
			script:   map[string][]errorpb.Code{"report": {errorpb.Code_NOT_FOUND}},
			wantDone: nil, wantAttempts: map[string]int{"report": 1}},
		{name: "a command with a deadline is not a report: an answer ends it",
			cmds:     []proto.Message{&internalpb.JobCommand{RequestId: "timed", Deadline: soon, Cmd: reportCmd("").Cmd}},
			script:   map[string][]errorpb.Code{"timed": {errorpb.Code_UNAVAILABLE}},
			wantDone: nil, wantAttempts: map[string]int{"timed": 1}},
		{name: "node-gone is not a report: an answer ends it",
			cmds:     []proto.Message{&internalpb.JobCommand{RequestId: "gone", Cmd: &internalpb.JobCommand_NodeGone{NodeGone: &internalpb.NodeGone{NodeId: "n1"}}}},
			script:   map[string][]errorpb.Code{"gone": {errorpb.Code_UNAVAILABLE}},
			wantDone: nil, wantAttempts: map[string]int{"gone": 1}},
		{name: "a stop to a node grain is not retried once answered",
			kind:     actors.KindNode,
			cmds:     []proto.Message{&internalpb.NodeCommand{RequestId: "stop"}},
			script:   map[string][]errorpb.Code{"stop": {errorpb.Code_UNAVAILABLE}},
			wantDone: nil, wantAttempts: map[string]int{"stop": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &scriptedGrain{script: tt.script, attempts: map[string]int{}}
			r := newTestRouter(t, g)
			kind := cmp.Or(tt.kind, actors.KindJob)
			for _, c := range tt.cmds {
				r.Send(kind, "x1", c)
			}
			testproc.Await(t, 20*time.Second, "the send queue drained", func() error {
				if !r.idle() {
					return fmt.Errorf("commands still queued")
				}
				return nil
			})
			done, attempts := g.state()
			if !slices.Equal(done, tt.wantDone) {
				t.Errorf("carried out %v, want %v", done, tt.wantDone)
			}
			for id, want := range tt.wantAttempts {
				if attempts[id] != want {
					t.Errorf("%s delivered %d times, want %d", id, attempts[id], want)
				}
			}
		})
	}
}
