package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/providers"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

// hashRouter answers every job command with a job hash, as the job grain
// does when it stores a job.
type hashRouter struct{}

func (hashRouter) Request(context.Context, string, string, proto.Message) (*internalpb.Reply, error) {
	return &internalpb.Reply{Payload: &internalpb.Reply_JobHash{JobHash: &managerpb.JobHash{}}}, nil
}
func (hashRouter) RequestFuture(string, string, proto.Message, time.Duration) *actor.Future {
	return nil
}
func (hashRouter) Send(string, string, proto.Message) {}

// headerStream records the headers a unary handler sets.
type headerStream struct{ md metadata.MD }

func (h *headerStream) Method() string { return "/norsk.api.manager.Manager/CreateJob" }
func (h *headerStream) SetHeader(md metadata.MD) error {
	h.md = metadata.Join(h.md, md)
	return nil
}
func (h *headerStream) SendHeader(md metadata.MD) error { return h.SetHeader(md) }
func (h *headerStream) SetTrailer(metadata.MD) error    { return errors.New("no trailers") }

// failingChecker is a cloud that does not answer.
type failingChecker struct{}

func (failingChecker) MissingSecurityGroups(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("RequestLimitExceeded")
}

// TestServer_JobWarnings_MissingSecurityGroup (issue 21 §9): CreateJob
// and UpdateJob of a job whose extra security group does not exist in
// the region of its pool's AWS tier succeed and answer a warning naming
// the group, the region, the pool and the tier in the norsk-warning
// header; a group that exists, a pool without AWS tiers and a cloud that
// does not answer give none.
func TestServer_JobWarnings_MissingSecurityGroup(t *testing.T) {
	store, log := persistence.TestStore(t)
	emu := ec2emu.Start(t, ec2emu.Options{SecurityGroups: []ec2emu.SecurityGroup{{Name: "srt"}}})
	putPool := func(p *managerpb.Pool) {
		k := persistence.PlacementPoolKey(p.GetName())
		b, err := proto.Marshal(&internalpb.PoolRecord{Pool: p})
		require.NoError(t, err)
		_, err = log.Append(context.Background(), k, 0, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	putPool(&managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{{Name: "onprem"}, {Name: "aws",
		Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{Region: emu.Region()}}}}})
	putPool(&managerpb.Pool{Name: "fixed", Tiers: []*managerpb.PoolTier{{Name: "onprem"}}})
	aws := providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL()})
	s := New(Config{Store: store, Router: hashRouter{}, SecurityGroups: aws})
	job := func(pool string, groups ...string) *managerpb.Job {
		return &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Tags: map[string]string{persistence.PoolTag: pool}, ExtraSecurityGroups: groups}
	}
	call := func(s *Server, update bool, j *managerpb.Job) []string {
		t.Helper()
		hs := &headerStream{}
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), hs)
		var err error
		if update {
			_, err = s.UpdateJob(ctx, j)
		} else {
			_, err = s.CreateJob(ctx, j)
		}
		require.NoError(t, err)
		return hs.md.Get(WarningHeader)
	}
	want := `job j: extra_security_groups: security group "typo" does not exist in region ` + emu.Region() + ` (pool cloud, tier aws)`
	for _, update := range []bool{false, true} {
		w := call(s, update, job("cloud", "srt", "typo"))
		require.Len(t, w, 1, "update %v", update)
		require.True(t, strings.HasPrefix(w[0], want), "warning %q\nwant      %q", w[0], want)
	}
	require.Empty(t, call(s, false, job("cloud", "srt")), "an existing group")
	require.Empty(t, call(s, false, job("fixed", "typo")), "a pool without AWS tiers")
	require.Empty(t, call(s, false, job("nope", "typo")), "a pool that does not exist")
	require.Empty(t, call(New(Config{Store: store, Router: hashRouter{}, SecurityGroups: failingChecker{}}), false, job("cloud", "typo")),
		"a cloud that does not answer")
}
