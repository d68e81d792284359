package ha

// Helpers of workers_test.go and partition_test.go. Names start with hb
// (this file's) so that they never collide with the package's other
// helpers.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
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

// runAs makes manager m run as uid (gid the same) from its next Start:
// the test binaries and the directories above m's data dir become
// readable and searchable by everyone, and m's data dir is created and
// owned by uid. The uid need not exist in /etc/passwd. Only root can do
// this.
func runAs(t testing.TB, m *testproc.Manager, uid int) {
	t.Helper()
	bin := testproc.Bin(t)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m.DataDir, uid, uid); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's directories are 0700: open the ones between the system
	// temporary directory and the data dir for searching.
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(m.DataDir); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.Setup = func(cmd *exec.Cmd) {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), NoSetGroups: true}
	}
}

// firewall drops loopback traffic between managers that run under
// different uids (runAs), with iptables owner matches in a chain of its
// own that OUTPUT jumps to. The test process (root) is never filtered, so
// test clients reach every manager throughout.
type firewall struct {
	t     testing.TB
	chain string
}

const chainPrefix = "NORSKHA"

// newFirewall creates the chain (named after this process) and the jump
// from OUTPUT, removed at cleanup even if the test fails. It skips the
// test unless it runs as root with a working iptables. Chains left behind
// by test processes that died are removed first.
func newFirewall(t testing.TB) *firewall {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("partition tests need root (iptables, and managers under their own uids)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("partition tests need iptables: not found on PATH")
	}
	if out, err := runIptables("-L", "OUTPUT", "-n"); err != nil {
		t.Skipf("partition tests need a working iptables: %v: %s", err, out)
	}
	removeStaleChains(t)
	f := &firewall{t: t, chain: chainPrefix + strconv.Itoa(os.Getpid())}
	if out, err := runIptables("-N", f.chain); err != nil {
		t.Fatalf("iptables -N %s: %v: %s", f.chain, err, out)
	}
	t.Cleanup(f.remove)
	if out, err := runIptables("-I", "OUTPUT", "-j", f.chain); err != nil {
		t.Fatalf("iptables -I OUTPUT -j %s: %v: %s", f.chain, err, out)
	}
	return f
}

// removeStaleChains removes the NORSKHA<pid> chains of processes that
// are gone (a test binary killed before its cleanup): their rules would
// drop traffic of a later run whose managers reuse the uids and ports.
func removeStaleChains(t testing.TB) {
	out, err := runIptables("-S")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "-N "+chainPrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid == os.Getpid() || testproc.PIDAlive(pid) {
			continue
		}
		t.Logf("removing the iptables chain %s%d left by a dead test process", chainPrefix, pid)
		(&firewall{t: t, chain: chainPrefix + name}).remove()
	}
}

func runIptables(args ...string) ([]byte, error) {
	return exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
}

// remove deletes the jump and the chain (every jump, should there be
// several).
func (f *firewall) remove() {
	for {
		if _, err := runIptables("-D", "OUTPUT", "-j", f.chain); err != nil {
			break
		}
	}
	if out, err := runIptables("-F", f.chain); err != nil {
		f.t.Errorf("iptables -F %s: %v: %s", f.chain, err, out)
	}
	if out, err := runIptables("-X", f.chain); err != nil {
		f.t.Errorf("iptables -X %s: %v: %s", f.chain, err, out)
	}
}

// managerPorts lists the ports m listens on for other managers: API (with the
// internal replication service), gossip, actor remote, Raft.
func managerPorts(m *testproc.Manager) []string {
	var out []string
	for _, a := range []string{m.APIAddr, m.GossipAddr, m.ActorAddr, m.RaftAddr} {
		out = append(out, a[strings.LastIndexByte(a, ':')+1:])
	}
	return out
}

// isolate drops every packet that a manager of one side sends to a port
// of a manager of the other side (TCP and UDP), in both directions.
// uids maps manager names to the uids they run under.
func (f *firewall) isolate(uids map[string]int, minority *testproc.Manager, majority ...*testproc.Manager) {
	f.t.Helper()
	for _, other := range majority {
		for _, dir := range [][2]*testproc.Manager{{minority, other}, {other, minority}} {
			from, to := dir[0], dir[1]
			for _, port := range managerPorts(to) {
				for _, proto := range []string{"tcp", "udp"} {
					args := []string{"-A", f.chain, "-m", "owner", "--uid-owner", strconv.Itoa(uids[from.Name]),
						"-p", proto, "-d", "127.0.0.1", "--dport", port, "-j", "DROP"}
					if out, err := runIptables(args...); err != nil {
						f.t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
					}
				}
			}
		}
	}
}

// heal removes every rule of the chain.
func (f *firewall) heal() {
	f.t.Helper()
	if out, err := runIptables("-F", f.chain); err != nil {
		f.t.Fatalf("iptables -F %s: %v: %s", f.chain, err, out)
	}
}

// rules returns the chain's rules (for logs).
func (f *firewall) rules() string {
	out, _ := runIptables("-S", f.chain)
	return string(bytes.TrimSpace(out))
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
