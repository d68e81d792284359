package agent

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protopath"
	"google.golang.org/protobuf/reflect/protorange"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/cluster/gateway"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// secretService is a service whose environment holds a credential.
func secretService(secret string) []*commonpb.Service {
	return []*commonpb.Service{{Name: "svc", Command: "sleep 60", Parameters: &commonpb.ServiceParameters{
		EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "AWS_SECRET_ACCESS_KEY", Value: secret}, {Name: "EMPTY"}}}}}
}

// envValues returns name and value of every environment variable in m,
// in turn.
func envValues(t *testing.T, m proto.Message) []string {
	t.Helper()
	var out []string
	require.NoError(t, protorange.Range(m.ProtoReflect(), func(v protopath.Values) error {
		if e, ok := v.Index(-1).Value.Interface().(protoreflect.Message); ok {
			if ev, ok := e.Interface().(*commonpb.EnvironmentVariable); ok {
				out = append(out, ev.GetName(), ev.GetValue())
			}
		}
		return nil
	}))
	return out
}

// TestAgent_ACL_EnvRedactedBelowOperator is issue 21 §6: environment
// values (credentials) reach a read or events token nowhere — JobById,
// JobSearch, GetBundle, ListBundles, the event stream's snapshot and live
// events — while an operator and a management token see them; names stay
// visible; the audit log never holds them; the stored job is intact.
func TestAgent_ACL_EnvRedactedBelowOperator(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	ctx := context.Background()
	a := aclAgent(t, true)
	boot, err := aclClient(t, a, "").AclBootstrap(ctx)
	require.NoError(t, err)
	mgmt := aclClient(t, a, boot.GetSecretId())
	tokens := map[string]string{"management": boot.GetSecretId()}
	for _, role := range []string{"operator", "read", "events"} {
		tok, err := mgmt.AclTokenCreate(ctx, role+"-token", role, 0)
		require.NoError(t, err)
		tokens[role] = tok.GetSecretId()
	}
	c := dial(t, a.APIAddr())
	as := func(role string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokens[role])
	}
	_, err = c.CreateJob(as("operator"), &managerpb.Job{JobId: &commonpb.JobId{JobId: "before"}, StartDateTime: timestamppb.Now(), Services: secretService(secret)})
	require.NoError(t, err)
	_, err = c.CreateBundle(as("operator"), &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b1"}, Pool: "eu",
		ResiliencePolicy: &managerpb.ResiliencePolicy{},
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "enc", StartMode: "manual", Job: &managerpb.Job{Description: "enc", Services: secretService(secret)}}}})
	require.NoError(t, err)

	for _, tc := range []struct {
		role     string
		redacted bool
		reads    bool // the role may call the reads (not events)
	}{
		{"management", false, true},
		{"operator", false, true},
		{"read", true, true},
		{"events", true, false},
	} {
		t.Run(tc.role, func(t *testing.T) {
			rctx := as(tc.role)
			want := []string{"AWS_SECRET_ACCESS_KEY", secret}
			if tc.redacted {
				want = []string{"AWS_SECRET_ACCESS_KEY", gateway.RedactedValue}
			}
			// check: every environment variable seen is the named one
			// with the value the role may see, or the empty one, still
			// empty; at least one was seen.
			check := func(what string, m proto.Message) {
				t.Helper()
				got := envValues(t, m)
				require.NotEmpty(t, got, "%s carries no environment", what)
				for i := 0; i < len(got); i += 2 {
					if got[i] == "EMPTY" {
						require.Empty(t, got[i+1], "%s: an empty value stays empty", what)
						continue
					}
					require.Equal(t, want, got[i:i+2], "%s", what)
				}
				if tc.redacted {
					require.NotContains(t, prototext.Format(m), secret, "%s", what)
				}
			}

			// The event stream: a snapshot (the active job)
			// and live events (a job created after it opened).
			sctx, cancel := context.WithCancel(rctx)
			defer cancel()
			s, err := c.EventStream(sctx, &managerpb.EventStreamRequest{PendingWindowS: 3600})
			require.NoError(t, err)
			snapshot := 0
			for {
				ev, err := s.Recv()
				require.NoError(t, err)
				if ev.GetInitialDataComplete() != nil {
					break
				}
				if ev.GetJobActive() != nil || ev.GetJobPending() != nil {
					check("snapshot "+eventKind(ev), ev)
					snapshot++
				}
			}
			require.Positive(t, snapshot, "the snapshot has the jobs")
			live := "live-" + tc.role
			_, err = c.CreateJob(as("operator"), &managerpb.Job{JobId: &commonpb.JobId{JobId: live}, StartDateTime: timestamppb.New(time.Now().Add(10 * time.Minute)), Services: secretService(secret)})
			require.NoError(t, err)
			for {
				ev, err := s.Recv()
				require.NoError(t, err)
				if u := ev.GetJobUpdated(); u != nil && u.GetJobWithHistory().GetJob().GetJobId().GetJobId() == live {
					check("live job_updated", ev)
					break
				}
			}
			ev, err := s.Recv()
			require.NoError(t, err)
			require.NotNil(t, ev.GetJobPending(), "job_pending follows the live job_updated")
			check("live job_pending", ev)
			cancel()

			if !tc.reads {
				return
			}
			got, err := c.JobById(rctx, &commonpb.JobId{JobId: "before"})
			require.NoError(t, err)
			check("JobById", got)
			js, err := c.JobSearch(rctx, &managerpb.JobSearchRequest{})
			require.NoError(t, err)
			found := 0
			for {
				j, err := js.Recv()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				check("JobSearch "+j.GetJob().GetJobId().GetJobId(), j)
				found++
			}
			require.GreaterOrEqual(t, found, 3, "the job, the bundle's derived jobs and the live ones")
			b, err := c.GetBundle(rctx, &managerpb.BundleId{BundleId: "b1"})
			require.NoError(t, err)
			check("GetBundle", b)
			l, err := c.ListBundles(rctx, &managerpb.ListBundlesRequest{})
			require.NoError(t, err)
			check("ListBundles", l)
			audit, err := c.ListAuditEntries(rctx, &managerpb.ListAuditEntriesRequest{})
			require.NoError(t, err)
			require.NotEmpty(t, audit.GetEntries())
			require.NotContains(t, prototext.Format(audit), secret, "the audit log holds no environment value")
		})
	}

	// What is stored is intact: an operator still reads the value.
	got, err := c.JobById(as("operator"), &commonpb.JobId{JobId: "before"})
	require.NoError(t, err)
	require.Equal(t, secret, got.GetJob().GetJob().GetServices()[0].GetParameters().GetEnvironmentVariables()[0].GetValue())
}
