package ha

// Helpers of workers_test.go and partition_test.go (the partition's
// firewall is testproc.Firewall). Names start with hb
// (this file's) so that they never collide with the package's other
// helpers.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// internalClient returns the internal Cluster service of manager m (on its API
// address), closed at the end of the test.
func internalClient(t testing.TB, m *testproc.Manager) internalpb.ClusterClient {
	t.Helper()
	conn, err := grpc.NewClient(m.APIAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return internalpb.NewClusterClient(conn)
}

// managerStatus is m's own view of itself (Raft state, applied index), asked
// with a 2 s timeout.
func managerStatus(cl internalpb.ClusterClient) (*internalpb.ManagerStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return cl.Status(ctx, &internalpb.StatusRequest{})
}

// sessionsOn returns the nodes whose worker session the node grains on
// this manager hold (connected), asked with a 2 s timeout.
func sessionsOn(cl internalpb.ClusterClient) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := cl.Liveness(ctx, &internalpb.LivenessRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range r.GetNodes() {
		if n.GetConnected() {
			out = append(out, n.GetNodeId())
		}
	}
	sort.Strings(out)
	return out, nil
}

// watchedCluster is a test cluster with an internal client per manager.
type watchedCluster struct {
	*testproc.Cluster
	internal map[string]internalpb.ClusterClient // manager name → client
}

func newWatchedCluster(t testing.TB, c *testproc.Cluster) *watchedCluster {
	hc := &watchedCluster{Cluster: c, internal: map[string]internalpb.ClusterClient{}}
	for _, m := range c.Managers {
		hc.internal[m.Name] = internalClient(t, m)
	}
	return hc
}

// leader returns the manager among ms that says it is the Raft leader
// and is named leader by every other manager of ms, waiting up to
// timeout.
func (hc *watchedCluster) leader(t testing.TB, timeout time.Duration, ms ...*testproc.Manager) *testproc.Manager {
	t.Helper()
	if len(ms) == 0 {
		ms = hc.Running()
	}
	var leader *testproc.Manager
	testproc.Await(t, timeout, "one leader all of "+managerNames(ms)+" agree on", func() error {
		leader = nil
		for _, m := range ms {
			st, err := managerStatus(hc.internal[m.Name])
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if st.GetLeader() == "" {
				return fmt.Errorf("%s knows no leader", m.Name)
			}
			for _, cand := range ms {
				if cand.Name == st.GetLeader() {
					if leader != nil && leader != cand {
						return fmt.Errorf("managers disagree on the leader: %s and %s", leader.Name, cand.Name)
					}
					leader = cand
				}
			}
			if leader == nil {
				return fmt.Errorf("%s names leader %q, not one of %s", m.Name, st.GetLeader(), managerNames(ms))
			}
		}
		st, err := managerStatus(hc.internal[leader.Name])
		if err != nil {
			return err
		}
		if st.GetRaftState() != "leader" {
			return fmt.Errorf("%s is named leader but is %s", leader.Name, st.GetRaftState())
		}
		return nil
	})
	return leader
}

// sessionsByManager maps each running manager's name to the nodes whose
// sessions it holds; managers that do not answer are left out.
func (hc *watchedCluster) sessionsByManager() map[string][]string {
	out := map[string][]string{}
	for _, m := range hc.Running() {
		if s, err := sessionsOn(hc.internal[m.Name]); err == nil {
			out[m.Name] = s
		}
	}
	return out
}

func managerNames(ms []*testproc.Manager) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return strings.Join(names, ",")
}

// clientOf connects a client to the given managers only.
func clientOf(t testing.TB, timeout time.Duration, ms ...*testproc.Manager) *client.NorskManager {
	t.Helper()
	addrs := make([]string, len(ms))
	for i, m := range ms {
		addrs[i] = m.APIAddr
	}
	cl, err := client.Connect(context.Background(), client.Settings{URL: strings.Join(addrs, ","), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// isUnavailable reports whether err is an answer of a manager that
// cannot serve the call now: Unavailable, or DeadlineExceeded when the
// manager kept waiting for a leader until the caller's deadline.
func isUnavailable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

// isNotFound reports whether err says the job does not exist.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// createAcked creates an empty job with the given id through cl until
// the cluster acknowledges it, for up to a minute (createJobAcked).
func createAcked(t testing.TB, cl *client.NorskManager, id string) {
	t.Helper()
	createJobAcked(t, cl, &managerpb.Job{JobId: &commonpb.JobId{JobId: id}})
}

// createJobAcked creates job through cl until the cluster acknowledges
// it, for up to a minute. An attempt that failed with Unavailable or
// DeadlineExceeded may have committed nonetheless, so AlreadyExists on a
// retry counts as the acknowledgement.
func createJobAcked(t testing.TB, cl *client.NorskManager, job *managerpb.Job) {
	t.Helper()
	id := job.GetJobId().GetJobId()
	retried := false
	testproc.Await(t, 60*time.Second, "CreateJob("+id+") acknowledged", func() error {
		_, err := cl.CreateJob(context.Background(), job)
		switch {
		case err == nil, retried && status.Code(err) == codes.AlreadyExists:
			return nil
		case isUnavailable(err):
			retried = true
			return err
		}
		t.Fatalf("CreateJob(%s): %v", id, err)
		return nil
	})
}
