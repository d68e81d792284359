package placement

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// TestEngine_Provision_RefusedCreate: a create the node side refuses
// every time (the mock pool has no URL left) is retried every
// provisionRetry, logged at warn once (not at every retry: that was a warn
// line every 5 s for as long as the job waited), and the job's placement
// failure says the node cannot be created and why, not that it "is being
// created". Once a create is accepted the note says it is being created.
func TestEngine_Provision_RefusedCreate(t *testing.T) {
	f, n := newProvisionFixture(t)
	var buf lockedBuffer
	f.eng.log = slog.New(slog.NewTextHandler(&buf, nil))
	var mu sync.Mutex
	empty := true
	f.router.other = func(ctx context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error) {
		mu.Lock()
		refuse := empty && kind == actors.KindPool
		mu.Unlock()
		if refuse {
			return nil, errors.New("mock node pool is empty")
		}
		return n.request(ctx, kind, id, cmd)
	}
	f.putJob(autoJob("a", 2, map[string]string{persistence.PoolTag: "elastic"}))
	for range 4 {
		f.pass()
		f.now = f.now.Add(provisionRetry)
	}
	f.pass()
	require.Empty(t, n.creates)
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN msg=\"create a node"), buf.String())
	u, ok := f.eng.LastFailure("a", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "node elastic-mock-1 cannot be created (take a mock pool URL: mock node pool is empty)")

	mu.Lock()
	empty = false
	mu.Unlock()
	f.now = f.now.Add(provisionRetry)
	f.pass()
	f.pass()
	f.pass() // a failure's note is the plan of the pass before
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)
	u, _ = f.eng.LastFailure("a", "primary")
	require.Contains(t, u.Reason, "node elastic-mock-1 is being created for it")
}

// lockedBuffer is a bytes.Buffer safe for the engine's goroutines' logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
