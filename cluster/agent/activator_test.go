package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestActivator_ActivatesAtStartUnderWrites: a PRE job turns ACTIVE once
// its start has come, also while a stream of writes keeps waking the
// activator (which then scans at most every 100 ms rather than at each
// write, and never holds back the wake for the next start).
func TestActivator_ActivatesAtStartUnderWrites(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	start := time.Now().Add(time.Second)
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "scheduled"}, StartDateTime: timestamppb.New(start)})
	require.NoError(t, err)
	state := func() managerpb.Job_JobState {
		r, err := c.JobById(ctx, &commonpb.JobId{JobId: "scheduled"})
		require.NoError(t, err)
		return r.GetJob().GetJob().GetState()
	}
	require.Equal(t, managerpb.Job_PRE, state(), "not before its start")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("w%05d", i)}}); err != nil {
				t.Errorf("create: %v", err)
				return
			}
		}
	})
	eventually(t, "the scheduled job ACTIVE", func() bool { return state() == managerpb.Job_ACTIVE })
	close(stop)
	wg.Wait()
}
