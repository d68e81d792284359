package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func envJob(value string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{{Name: "a", Parameters: &commonpb.ServiceParameters{
		EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "AWS_SECRET_ACCESS_KEY", Value: value}, {Name: "EMPTY"}}}}}}
}

// TestRedactFor: environment values are replaced for roles below operator
// (read, events) wherever a job sits in the message (a job's history, a
// bundle's templates), names and empty values stay; operator, management
// and ACLs off see them (issue 21 §6).
func TestRedactFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		acl      bool
		role     string
		redacted bool
	}{
		{"acl off", false, "", false},
		{"management", true, "management", false},
		{"operator", true, "operator", false},
		{"read", true, "read", true},
		{"events", true, "events", true},
		{"no token", true, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{cfg: Config{ACL: ACLConfig{Enabled: tc.acl}}}
			ctx := identity.With(context.Background(), identity.Caller{Role: tc.role})
			ev := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobUpdated{JobUpdated: &managerpb.JobUpdated{
				JobWithHistory: &managerpb.JobWithHistory{Job: envJob("s3cr3t")}}}}
			b := &managerpb.ListBundlesResponse{Bundles: []*managerpb.BundleInfo{{Bundle: &managerpb.Bundle{
				Jobs: []*managerpb.BundleJobSpec{{JobName: "enc", Job: envJob("s3cr3t")}}}}}}
			want := "s3cr3t"
			if tc.redacted {
				want = RedactedValue
			}
			for _, m := range []proto.Message{redactFor(s, ctx, ev), redactFor(s, ctx, b)} {
				var job *managerpb.Job
				switch x := m.(type) {
				case *managerpb.EventStreamEvent:
					job = x.GetJobUpdated().GetJobWithHistory().GetJob()
				case *managerpb.ListBundlesResponse:
					job = x.GetBundles()[0].GetBundle().GetJobs()[0].GetJob()
				}
				env := job.GetServices()[0].GetParameters().GetEnvironmentVariables()
				require.Equal(t, "AWS_SECRET_ACCESS_KEY", env[0].GetName())
				require.Equal(t, want, env[0].GetValue())
				require.Equal(t, "EMPTY", env[1].GetName())
				require.Empty(t, env[1].GetValue())
			}
		})
	}
	redactEnv(nil) // safe
}

// TestRedactEnv_SecondPassOnlyReads: a stream's derived event shares its
// job with the log event pushed before it, which the sender may be
// encoding while the derived one is redacted; the second pass must write
// nothing (the race detector fails this test otherwise).
func TestRedactEnv_SecondPassOnlyReads(t *testing.T) {
	job := envJob("secret")
	redactEnv(job)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			_ = proto.Size(job)
		}
	}()
	for range 50 {
		redactEnv(job)
	}
	<-done
	require.Equal(t, RedactedValue, job.GetServices()[0].GetParameters().GetEnvironmentVariables()[0].GetValue())
}

// TestRedactEnv_Hashes: a redacted caller's current_hash is the hash of
// the redacted job, the same whatever the secret (no offline guessing of
// a value from the hash); an instance's definition_hash follows it, or is
// 0 when the definition is not in the message; a second pass changes
// nothing.
func TestRedactEnv_Hashes(t *testing.T) {
	answer := func(secret string) *managerpb.JobByIdResponse {
		j := envJob(secret)
		j.CurrentHash = job.Hash(j)
		return &managerpb.JobByIdResponse{Job: &managerpb.JobWithHistory{Job: j}, Instances: []*managerpb.RunningJob{
			{NodeId: &commonpb.NodeId{NodeId: "n1"}, DefinitionHash: j.CurrentHash},
			{NodeId: &commonpb.NodeId{NodeId: "n2"}, DefinitionHash: 12345},
		}}
	}
	a, b := answer("7391"), answer("7392")
	require.NotEqual(t, a.GetJob().GetJob().GetCurrentHash(), b.GetJob().GetJob().GetCurrentHash())
	redactEnv(a)
	redactEnv(b)
	h := a.GetJob().GetJob().GetCurrentHash()
	require.Equal(t, h, b.GetJob().GetJob().GetCurrentHash(), "the redacted hash must not depend on the secret")
	require.Equal(t, job.Hash(a.GetJob().GetJob()), h)
	require.Equal(t, h, a.GetInstances()[0].GetDefinitionHash())
	require.Zero(t, a.GetInstances()[1].GetDefinitionHash(), "an older definition's hash is unknown to a redacted caller")
	before := proto.Clone(a)
	redactEnv(a)
	require.True(t, proto.Equal(before, a), "a second pass changes nothing")

	d := &managerpb.DefinitionDrift{CurrentHash: 99, Message: "job j: primary on node n1 runs definition hash 12345; current 99",
		Instances: []*managerpb.RunningJob{{DefinitionHash: 12345}}}
	redactEnv(d)
	require.Zero(t, d.GetCurrentHash())
	require.Equal(t, "job j: primary on node n1 runs definition hash <redacted>; current <redacted>", d.GetMessage())
}
