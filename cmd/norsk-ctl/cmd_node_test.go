package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestCtl_SlotCommands(t *testing.T) {
	_, addr := newTestFake(t)
	out := mustRun(t, addr, "slot", "register", "rack-1", "--tag", "site=lab")
	want := `registered cluster slot "rack-1"
node id: node-1
token:   token-1

Run the worker on the slot's host with:

  norsk-ctl --mode=worker --token=token-1 --manager-url=` + addr + ` \
    --listen=127.0.0.1:7001 --state-dir=/var/lib/norsk-worker
`
	if out != want {
		t.Errorf("slot register printed:\n%s\nwant:\n%s", out, want)
	}

	got := mustRun(t, addr, "slot", "list")
	wantList := "NAME    NODE ID  ACTIVE  TOKEN USED  ADDRESS  LAST SEEN  TOKEN\n" +
		"rack-1  node-1   no      no          -        never      token-1\n"
	if got != wantList {
		t.Errorf("slot list printed:\n%q\nwant:\n%q", got, wantList)
	}

	// A worker registers: the slot becomes active with its address.
	m, err := client.Connect(context.Background(), client.Settings{URL: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.ClusterMemberRegister(context.Background(), &managerpb.ClusterMemberRegisterRequest{
		Token: "token-1", Address: "10.0.0.7", Port: 7001,
	}); err != nil {
		t.Fatal(err)
	}
	got = mustRun(t, addr, "slot", "list")
	if !regexp.MustCompile(`rack-1\s+node-1\s+yes\s+yes\s+10\.0\.0\.7:7001\s+0s ago\s+token-1`).MatchString(got) {
		t.Errorf("slot list after registration printed:\n%s", got)
	}
	got = mustRun(t, addr, "node", "list")
	if !regexp.MustCompile(`node-1\s+cluster\s+started\s+yes\s+127\.0\.0\.1\s+-\s+0/\?\s+-\s+0s ago\s+0%\s+0MiB\s+-\s+-\s+site=lab`).MatchString(got) {
		t.Errorf("node list printed:\n%s", got)
	}

	if got := mustRun(t, addr, "slot", "deregister", "node-1"); got != "deregistered cluster slot node-1\n" {
		t.Errorf("slot deregister printed %q", got)
	}
	if got := mustRun(t, addr, "slot", "list"); !strings.HasPrefix(got, "no cluster slots") {
		t.Errorf("slot list after deregister printed %q", got)
	}
}

func TestWriteSlotRegistered_RemoteManager(t *testing.T) {
	var b strings.Builder
	if err := writeSlotRegistered(&b, "r", "node-1", "tok'x", "m1:6790,m2:6790", ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`--token='tok'\''x'`, "--manager-url=m1:6790,m2:6790", "--listen=WORKER-IP:7001", "--state-dir=/var/lib/norsk-worker",
		"Replace WORKER-IP",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestWriteSlotRegistered_TLS(t *testing.T) {
	var b strings.Builder
	if err := writeSlotRegistered(&b, "r", "node-1", "tok", "127.0.0.1:6790", "/etc/norsk/ca.pem"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--ca-cert=/etc/norsk/ca.pem --tls-cert=WORKER.pem --tls-key=WORKER-key.pem", "tls cert create --worker"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCtlAllLoopback(t *testing.T) {
	cases := []struct {
		url  string
		want bool
	}{
		{"localhost:6790", true},
		{"127.0.0.1:1,[::1]:2", true},
		{"127.0.0.1:1,10.0.0.1:2", false},
		{"manager.example:6790", false},
		{"bad,,", false},
	}
	for _, tc := range cases {
		if got := ctlAllLoopback(tc.url); got != tc.want {
			t.Errorf("ctlAllLoopback(%q) = %v, want %v", tc.url, got, tc.want)
		}
	}
}

func TestWriteNodeTable(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	nodes := []*managerpb.NodeInfo{
		{
			Metadata:        &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "aws-1"}, Tags: map[string]string{"b": "2", "a": "1"}},
			RunningMetadata: &commonpb.RunningNodeMetadata{PublicIpAddress: "203.0.113.9"},
			Provider:        managerpb.NodeProvider_NODE_PROVIDER_AWS,
			State:           managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
			Connected:       true,
			LastSeen:        timestamppb.New(now.Add(-90 * time.Second)),
			Instances: []*managerpb.RunningJob{{
				JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "j1"}, Role: "primary"},
				NodeId: &commonpb.NodeId{NodeId: "aws-1"},
			}},
			CpuPercentage: 42.4, MemoryUsedMib: 512,
			RuntimeConditions: []*commonpb.RuntimeCondition{{Runtime: "docker", Ok: false, Reason: "docker engine at unix:///x unreachable: refused"}},
			Resources: &commonpb.NodeResources{Capacity: 8, Templates: []*commonpb.ProductTemplateOffer{
				{Name: "hello", Versions: []string{"1.0", "1.1"}}, {Name: "ingest", Versions: []string{"2"}}}},
			AllocatedCapacity: 3.5, Zone: "eu-west-2a",
		},
		{
			Metadata:   &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "mock-1"}},
			Provider:   managerpb.NodeProvider_NODE_PROVIDER_MOCK,
			State:      managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED,
			StopReason: managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED.Enum(),
			Orphans:    []*managerpb.Orphan{{JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "o1"}, Role: "primary"}}},
			Contested:  "taken by a manager outside this cluster",
		},
	}
	var b strings.Builder
	if err := writeNodeTable(&b, now, nodes); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got:\n%s", b.String())
	}
	for i, re := range []string{
		`^NODE ID\s+PROVIDER\s+STATE\s+CONNECTED\s+ADDRESS\s+JOBS\s+CAPACITY\s+ZONE\s+LAST SEEN\s+CPU\s+MEM\s+RUNTIME\s+TEMPLATES\s+TAGS\s+ALERTS$`,
		`^aws-1\s+aws\s+started\s+yes\s+203\.0\.113\.9\s+j1/primary\s+3\.5/8\s+eu-west-2a\s+1m ago\s+42%\s+512MiB\s+docker down\s+hello\(1\.0,1\.1\),ingest\(2\)\s+a=1,b=2\s+-$`,
		`^mock-1\s+mock\s+stopped \(health_ping_time_exceeded\)\s+no\s+-\s+-\s+0/\?\s+-\s+never\s+0%\s+0MiB\s+-\s+-\s+-\s+1 orphan\(s\), contested$`,
	} {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want match of %s", i, lines[i], re)
		}
	}
}

// TestAddClientCommands_SharedFlags checks that the operator commands work
// whether or not the worker flags already define --manager-url (persistent or
// local) and -o.
func TestAddClientCommands_SharedFlags(t *testing.T) {
	_, addr := newTestFake(t)
	cases := []struct {
		name  string
		setup func(root *cobra.Command)
	}{
		{"none", func(*cobra.Command) {}},
		{"persistent", func(root *cobra.Command) { root.PersistentFlags().String(ctlFlagManagerURL, "", "worker's") }},
		{"local", func(root *cobra.Command) { root.Flags().StringP(ctlFlagManagerURL, "o", "", "worker's") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := &cobra.Command{Use: "norsk-ctl", SilenceErrors: true, SilenceUsage: true}
			tc.setup(root)
			addClientCommands(root)
			var out, errOut strings.Builder
			root.SetOut(&out)
			root.SetErr(&errOut)
			root.SetArgs([]string{"node", "list", "--manager-url", addr})
			if err := root.ExecuteContext(testCtx()); err != nil || out.String() != "no nodes\n" {
				t.Fatalf("node list: %v, stdout %q, stderr %q", err, out.String(), errOut.String())
			}
		})
	}
}

func TestWriteNodeDetails(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	n := &managerpb.NodeInfo{
		Metadata:        &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n1"}},
		RunningMetadata: &commonpb.RunningNodeMetadata{PrivateIpAddress: "10.0.0.5"},
		Provider:        managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:           managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Connected:       true,
		LastSeen:        timestamppb.New(now.Add(-time.Second)),
		RuntimeConditions: []*commonpb.RuntimeCondition{{Runtime: "docker", Reason: "docker engine at tcp://127.0.0.1:1 unreachable: connection refused",
			Since: timestamppb.New(now.Add(-10 * time.Second))}},
	}
	var b strings.Builder
	if err := writeNodeDetails(&b, now, n); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Node:       n1\n", "State:      started\n", "Connected:  yes\n", "Address:    10.0.0.5\n",
		"Runtime:\n  docker: down since 10s ago: docker engine at tcp://127.0.0.1:1 unreachable: connection refused\n",
		"Jobs:       -\n",
		"Capacity:   unknown (the worker reported none), 0 units allocated\n", "GPU:        none\n", "Capability: -\n",
		"Zone:       -\n", "Cloud:      unspecified\n",
		"Cores:      none offered (no job requiring cores is placed here)\n", "Machine:    -; shape -; subnet -\n",
		"Templates:  none\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	n.Resources = &commonpb.NodeResources{Capacity: 4, GpuCapacity: 2, GpuModel: "nvidia-l4", Capabilities: map[string]string{"nvenc": "true", "av1": "hw"},
		Templates: []*commonpb.ProductTemplateOffer{{Name: "hello", Versions: []string{"1.0", "1.1"}}}}
	n.AllocatedCapacity, n.FreeCapacity, n.AllocatedGpuCapacity, n.FreeGpuCapacity = 1.5, 2.5, 0.5, 1.5
	n.Zone, n.Cloud = "z1", managerpb.Cloud_CLOUD_CLUSTER
	n.Cores, n.PinnedCores = []uint32{0, 1, 2, 3, 4, 5, 6, 7}, []uint32{2, 3, 6}
	n.Architecture, n.Shape, n.Subnet = "x86_64", "bare-metal-32", "lan-2"
	b.Reset()
	if err := writeNodeDetails(&b, now, n); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Capacity:   4 units, 1.5 allocated, 2.5 free\n", "GPU:        2 units, 0.5 allocated, 1.5 free (nvidia-l4)\n",
		"Capability: av1=hw,nvenc=true\n", "Zone:       z1\n", "Cloud:      cluster\n",
		"Cores:      0-7, 3 pinned (2-3,6)\n", "Machine:    x86_64; shape bare-metal-32; subnet lan-2\n",
		"Templates:  hello (1.0, 1.1)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	n.RuntimeConditions = nil
	b.Reset()
	if err := writeNodeDetails(&b, now, n); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Runtime:\n  (nothing reported)\n") {
		t.Errorf("without conditions:\n%s", b.String())
	}
}

func TestCtl_NodeGet(t *testing.T) {
	_, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "m1")
	if out := mustRun(t, addr, "node", "get", "m1"); !strings.Contains(out, "Node:       m1\n") || !strings.Contains(out, "Connected:  yes\n") {
		t.Errorf("node get printed:\n%s", out)
	}
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "node", "get", "nope")
	if r.code != ctlExitNotFound || !strings.Contains(r.stderr, "not found: node nope") {
		t.Errorf("node get of an unknown node: %+v", r)
	}
}
