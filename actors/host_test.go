package actors_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/norsk-oss/norsk-manager/actors"
)

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

// TestHost_PassivationLosesNoCommand sends commands while the grain keeps
// passivating itself: every command must be handled exactly once by some
// activation.
func TestHost_PassivationLosesNoCommand(t *testing.T) {
	var handled, activations atomic.Int64
	kind := actors.Kind{Name: "counter", Props: func(string) *actor.Props {
		return actor.PropsFromFunc(func(ctx actor.Context) {
			switch ctx.Message().(type) {
			case *actor.Started:
				activations.Add(1)
			case *wrapperspb.Int64Value:
				if handled.Add(1)%7 == 0 {
					ctx.Send(ctx.Parent(), &actors.Passivate{})
				}
			}
		})
	}}
	system := quietSystem()
	h, err := actors.NewHost(system, actors.HostConfig{}, kind)
	require.NoError(t, err)
	t.Cleanup(func() { h.Stop(); system.Shutdown() })
	const senders, each, rounds = 8, 25, 10
	for r := range rounds {
		var wg sync.WaitGroup
		for s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					h.Send("counter", "one", wrapperspb.Int64(int64((r*senders+s)*each+i)))
				}
			}()
		}
		wg.Wait()
		want := int64((r + 1) * senders * each)
		deadline := time.Now().Add(10 * time.Second)
		for handled.Load() < want && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		require.Equal(t, want, handled.Load(), "commands lost across passivations (round %d)", r)
	}
	require.Greater(t, activations.Load(), int64(1), "the grain should have passivated and come back")
}

func TestHost_RequestUnknownKind(t *testing.T) {
	system := quietSystem()
	h, err := actors.NewHost(system, actors.HostConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Stop(); system.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = h.Request(ctx, "nope", "x", wrapperspb.Int64(1))
	require.Error(t, err)
}
