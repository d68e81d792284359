package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
)

// ClusterKind turns k into a protoactor cluster kind: the cluster spawns,
// for each identity, the same thin supervisor as the local Host, which
// learns its identity at activation and spawns k's stateful actor as its
// child under k's strategy. A grain that passivates drains the commands
// already forwarded to its child, then stops; the cluster's identity lookup
// activates it again on its owner at the next command.
func ClusterKind(k Kind) *cluster.Kind {
	if k.Strategy == nil {
		k.Strategy = DefaultGrainStrategy()
	}
	d := NewPooledDispatcher()
	props := actor.PropsFromProducer(func() actor.Actor {
		return &clusterSupervisor{kind: k, dispatcher: d}
	}, actor.WithSupervisor(k.Strategy), actor.WithDispatcher(d))
	return cluster.NewKind(k.Name, props)
}

// clusterSupervisor is grainSupervisor for cluster grains: the identity
// comes from the cluster at activation, and passivation stops the grain
// itself (the cluster's placement actor watches it).
type clusterSupervisor struct {
	kind Kind
	// dispatcher runs the grain's mailboxes (its kind's PooledDispatcher).
	dispatcher actor.Dispatcher
	child      *actor.PID
	stopping   bool
}

func (s *clusterSupervisor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		id := cluster.GetClusterIdentity(ctx)
		s.child = ctx.Spawn(s.kind.Props(id.GetIdentity()).Configure(actor.WithDispatcher(s.dispatcher)))
		if s.kind.OnActivate != nil {
			s.kind.OnActivate()
		}
	case *Passivate, *actor.Terminated:
		if s.stopping {
			return
		}
		s.stopping = true
		// Touch is answered in mailbox order: once the child answers, what
		// was forwarded before has been handled. Commands that arrive while
		// draining are still forwarded; ones after the stop are dead
		// letters, which cluster requests retry on the new activation.
		f := ctx.RequestFuture(s.child, &actor.Touch{}, drainTimeout)
		ctx.ReenterAfter(f, func(any, error) { ctx.Stop(ctx.Self()) })
	case *cluster.ClusterInit, actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		if s.child != nil {
			ctx.Forward(s.child)
		}
	}
}
