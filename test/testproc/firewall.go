package testproc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// RunAs makes manager m run as uid (gid the same) from its next Start, so
// that a Firewall can tell its loopback traffic apart from the other
// managers': the test binaries and the directories above m's data dir
// become readable and searchable by everyone, and m's data dir is created
// and owned by uid. The uid need not exist in /etc/passwd. Only root can
// do this (NewFirewall skips the test otherwise, so call it first).
//
// Test packages that may run at the same time must use distinct uids:
// the firewall's rules match by uid.
func RunAs(t testing.TB, m *Manager, uid int) {
	t.Helper()
	bin := Bin(t)
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

// Firewall drops loopback traffic between managers that run under
// different uids (RunAs), with iptables owner matches in a chain of its
// own that OUTPUT jumps to. The test process (root) is never filtered, so
// test clients reach every manager throughout.
//
// Managers on one host all talk over 127.0.0.1, so owner matches are what
// keeps every packet on 127.0.0.1: network namespaces would give each
// manager its own lo, but manager-to-manager traffic would then have to
// leave 127.0.0.0/8.
type Firewall struct {
	t testing.TB
	// Chain is the iptables chain holding the rules (NORSKHA<pid>).
	Chain string
}

const chainPrefix = "NORSKHA"

// NewFirewall creates the chain (named after this process) and the jump
// from OUTPUT, removed at cleanup even if the test fails. It skips the
// test unless it runs as root with a working iptables. Chains left behind
// by test processes that died are removed first.
func NewFirewall(t testing.TB) *Firewall {
	t.Helper()
	if reason := FirewallUnavailable(); reason != "" {
		t.Skip(reason)
	}
	removeStaleChains(t)
	f := &Firewall{t: t, Chain: chainPrefix + strconv.Itoa(os.Getpid())}
	if out, err := runIptables("-N", f.Chain); err != nil {
		t.Fatalf("iptables -N %s: %v: %s", f.Chain, err, out)
	}
	t.Cleanup(f.remove)
	if out, err := runIptables("-I", "OUTPUT", "-j", f.Chain); err != nil {
		t.Fatalf("iptables -I OUTPUT -j %s: %v: %s", f.Chain, err, out)
	}
	return f
}

// FirewallUnavailable returns why NewFirewall would skip ("" if it would
// not): partitions need root (iptables, and managers under their own
// uids) and a working iptables.
func FirewallUnavailable() string {
	if os.Geteuid() != 0 {
		return "partition tests need root (iptables, and managers under their own uids)"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return "partition tests need iptables: not found on PATH"
	}
	if out, err := runIptables("-L", "OUTPUT", "-n"); err != nil {
		return "partition tests need a working iptables: " + err.Error() + ": " + string(bytes.TrimSpace(out))
	}
	return ""
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
		if err != nil || pid == os.Getpid() || PIDAlive(pid) {
			continue
		}
		t.Logf("removing the iptables chain %s%d left by a dead test process", chainPrefix, pid)
		(&Firewall{t: t, Chain: chainPrefix + name}).remove()
	}
}

func runIptables(args ...string) ([]byte, error) {
	return exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
}

// remove deletes the jump and the chain (every jump, should there be
// several).
func (f *Firewall) remove() {
	for {
		if _, err := runIptables("-D", "OUTPUT", "-j", f.Chain); err != nil {
			break
		}
	}
	if out, err := runIptables("-F", f.Chain); err != nil {
		f.t.Errorf("iptables -F %s: %v: %s", f.Chain, err, out)
	}
	if out, err := runIptables("-X", f.Chain); err != nil {
		f.t.Errorf("iptables -X %s: %v: %s", f.Chain, err, out)
	}
}

// ManagerPorts lists the ports m listens on for other managers: API (with
// the internal replication service), gossip, actor remote, Raft.
func ManagerPorts(m *Manager) []string {
	var out []string
	for _, a := range []string{m.APIAddr, m.GossipAddr, m.ActorAddr, m.RaftAddr} {
		out = append(out, a[strings.LastIndexByte(a, ':')+1:])
	}
	return out
}

// Isolate drops every packet that a manager of one side sends to a port
// of a manager of the other side (TCP and UDP), in both directions.
// uids maps manager names to the uids they run under (RunAs). It fails
// the test if a rule cannot be added.
func (f *Firewall) Isolate(uids map[string]int, minority *Manager, majority ...*Manager) {
	f.t.Helper()
	for _, other := range majority {
		for _, dir := range [][2]*Manager{{minority, other}, {other, minority}} {
			from, to := dir[0], dir[1]
			for _, port := range ManagerPorts(to) {
				for _, proto := range []string{"tcp", "udp"} {
					args := []string{"-A", f.Chain, "-m", "owner", "--uid-owner", strconv.Itoa(uids[from.Name]),
						"-p", proto, "-d", "127.0.0.1", "--dport", port, "-j", "DROP"}
					if out, err := runIptables(args...); err != nil {
						f.t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
					}
				}
			}
		}
	}
}

// Heal removes every rule of the chain; it fails the test if it cannot.
func (f *Firewall) Heal() {
	f.t.Helper()
	if out, err := runIptables("-F", f.Chain); err != nil {
		f.t.Fatalf("iptables -F %s: %v: %s", f.Chain, err, out)
	}
}

// Rules returns the chain's rules, one per line (for logs).
func (f *Firewall) Rules() string {
	out, _ := runIptables("-S", f.Chain)
	return string(bytes.TrimSpace(out))
}
