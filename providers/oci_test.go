package providers

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ociemu"
)

const ociAD = "EMU:TEST-AD-1"

// recordingDispatcher passes requests on and remembers their
// opc-client-retries headers (the SDK sends "false" for a request it
// will not retry itself).
type recordingDispatcher struct {
	next common.HTTPRequestDispatcher

	mu      sync.Mutex
	retries []string
}

// Do implements common.HTTPRequestDispatcher.
func (d *recordingDispatcher) Do(r *http.Request) (*http.Response, error) {
	d.mu.Lock()
	d.retries = append(d.retries, r.Header.Get("opc-client-retries"))
	d.mu.Unlock()
	return d.next.Do(r)
}

func (d *recordingDispatcher) clientRetries() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.retries...)
}

type ociFixture struct {
	emu    *ociemu.Server
	p      *OCI
	health *Health
	http   *recordingDispatcher
}

// newOCIFixture starts an emulator and an OCI provider pointed at it with
// Endpoint; the HTTP dispatcher refuses any other host.
func newOCIFixture(t *testing.T, opts ociemu.Options, mod func(*OCIConfig)) *ociFixture {
	t.Helper()
	emu := ociemu.New(t, opts)
	f := &ociFixture{emu: emu, health: NewHealth(time.Minute, 3, nil, nil)}
	f.p = f.provider(t, mod)
	return f
}

// provider makes another provider on the fixture's emulator (a restarted
// manager).
func (f *ociFixture) provider(t *testing.T, mod func(*OCIConfig)) *OCI {
	t.Helper()
	var scratch common.BaseClient
	f.emu.ConfigureClient(&scratch) // only for its loopback-only dispatcher
	f.http = &recordingDispatcher{next: scratch.HTTPClient}
	cfg := OCIConfig{
		Provider:      f.emu.ConfigurationProvider(),
		CompartmentID: ociemu.DefaultCompartment,
		Endpoint:      f.emu.URL(),
		HTTPClient:    f.http,
		Health:        f.health,
		ShapeOCPUs:    2,
		ShapeMemoryGB: 8,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewOCI(cfg)
	if err != nil {
		t.Fatalf("NewOCI: %v", err)
	}
	return p
}

func ociSpec(nodeID, arch, shape string) LaunchSpec {
	tags := map[string]string{"team": "media", "env": "test"}
	return LaunchSpec{
		NodeID:   nodeID,
		Tags:     tags,
		UserData: "#!/bin/sh\necho norsk " + nodeID + "\n",
		OCI: &managerpb.CreateOciNodeRequest{
			NodeId:             &commonpb.NodeId{NodeId: nodeID},
			Tags:               tags,
			AvailabilityDomain: ociAD,
			Architecture:       arch,
			Shape:              shape,
			Subnet:             ociemu.DefaultSubnet,
		},
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func healthOf(h *Health, loc string) managerpb.Health {
	for _, l := range h.Snapshot() {
		if l.Location == loc {
			return l.Health
		}
	}
	return -1
}

func TestOCILaunchDescribeFindTerminate(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{RunningAfter: 100 * time.Millisecond}, nil)
	ctx := ctxT(t, 30*time.Second)
	spec := ociSpec("node-1", "x86_64", "VM.Standard.E4.Flex")

	inst, err := f.p.Launch(ctx, spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if inst.State != Pending || inst.Location != ociAD || !strings.HasPrefix(inst.ID, "ocid1.instance.") {
		t.Fatalf("launched %+v", inst)
	}
	if got := inst.Running.GetProviderMetadata().GetOci().GetInstanceId(); got != inst.ID {
		t.Errorf("provider metadata instance id %q, want %q", got, inst.ID)
	}

	lr, ok := f.emu.LastLaunch()
	if !ok {
		t.Fatal("no launch recorded")
	}
	if lr.DisplayName != "norsk-node-1" || lr.CompartmentID != ociemu.DefaultCompartment || lr.AvailabilityDomain != ociAD ||
		lr.Shape != "VM.Standard.E4.Flex" || lr.SubnetID != ociemu.DefaultSubnet || lr.SourceType != "image" {
		t.Errorf("launch record %+v", lr)
	}
	if lr.OCPUs != 2 || lr.MemoryInGBs != 8 {
		t.Errorf("shape config %v OCPUs %v GB, want 2, 8", lr.OCPUs, lr.MemoryInGBs)
	}
	if want := ociemu.ImageID("Canonical-Ubuntu-24.04-2024.10.09-0"); lr.ImageID != want {
		t.Errorf("image %s, want the newest x86_64 image %s", lr.ImageID, want)
	}
	if string(lr.UserData) != spec.UserData {
		t.Errorf("user data %q, want %q", lr.UserData, spec.UserData)
	}
	if lr.FreeformTags[NodeIDTag] != "node-1" || lr.FreeformTags["team"] != "media" || lr.FreeformTags["env"] != "test" {
		t.Errorf("freeform tags %v", lr.FreeformTags)
	}
	if lr.RetryToken != ociRetryToken("node-1") || lr.RetryToken == "" || len(lr.RetryToken) > ociemu.MaxRetryTokenLength {
		t.Errorf("retry token %q, want %q", lr.RetryToken, ociRetryToken("node-1"))
	}

	// Describe until running, with the primary VNIC's addresses.
	deadline := time.Now().Add(10 * time.Second)
	var d Instance
	for {
		d, err = f.p.Describe(ctx, ociAD, inst.ID)
		if err != nil {
			t.Fatalf("Describe: %v", err)
		}
		if d.State == Running {
			break
		}
		if d.State != Pending {
			t.Fatalf("state %v while waiting for running", d.State)
		}
		if time.Now().After(deadline) {
			t.Fatal("never running")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.ID != inst.ID || d.Location != ociAD {
		t.Errorf("described %+v", d)
	}
	if d.Running.GetPrivateIpAddress() != "127.0.1.1" || d.Running.GetPublicIpAddress() != "127.0.2.1" {
		t.Errorf("addresses %q / %q, want 127.0.1.1 / 127.0.2.1", d.Running.GetPrivateIpAddress(), d.Running.GetPublicIpAddress())
	}
	if d.Running.GetProviderMetadata().GetOci().GetInstanceId() != inst.ID {
		t.Errorf("provider metadata %v", d.Running.GetProviderMetadata())
	}

	// Find by tag, in that AD only.
	got, ok, err := f.p.Find(ctx, ociAD, "node-1")
	if err != nil || !ok || got.ID != inst.ID || got.State != Running {
		t.Fatalf("Find = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := f.p.Find(ctx, ociAD, "node-2"); err != nil || ok {
		t.Errorf("Find(other node) = %v, %v", ok, err)
	}
	if _, ok, err := f.p.Find(ctx, "EMU:TEST-AD-2", "node-1"); err != nil || ok {
		t.Errorf("Find(other AD) = %v, %v", ok, err)
	}

	// Terminate, twice; then it is gone and Find skips it.
	if err := f.p.Terminate(ctx, ociAD, inst.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if err := f.p.Terminate(ctx, ociAD, inst.ID); err != nil {
		t.Fatalf("Terminate again: %v", err)
	}
	if d, err := f.p.Describe(ctx, ociAD, inst.ID); err != nil || d.State != Gone {
		t.Errorf("Describe after terminate = %+v, %v", d, err)
	}
	if _, ok, err := f.p.Find(ctx, ociAD, "node-1"); err != nil || ok {
		t.Errorf("Find after terminate = %v, %v", ok, err)
	}
	// Once OCI forgets it: Describe says ErrNotFound, Terminate succeeds.
	if err := f.emu.Purge(inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Describe(ctx, ociAD, inst.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Describe after purge: %v, want ErrNotFound", err)
	}
	if err := f.p.Terminate(ctx, ociAD, inst.ID); err != nil {
		t.Errorf("Terminate unknown: %v", err)
	}

	if h := healthOf(f.health, ociAD); h != managerpb.Health_HEALTHY {
		t.Errorf("health %v, want HEALTHY", h)
	}
	for i, r := range f.http.clientRetries() {
		if r != "false" {
			t.Errorf("request %d: opc-client-retries %q: the SDK's retry policy is on", i, r)
		}
	}
	if len(f.emu.AuthFailures()) != 0 {
		t.Errorf("auth failures: %v", f.emu.AuthFailures())
	}
}

func TestOCIDescribeStates(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{RunningAfter: ociemu.Never}, nil)
	ctx := ctxT(t, 30*time.Second)
	inst, err := f.p.Launch(ctx, ociSpec("node-s", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		state string
		want  State
	}{
		{ociemu.Provisioning, Pending},
		{ociemu.Starting, Pending},
		{ociemu.Running, Running},
		{ociemu.Stopping, Gone},
		{ociemu.Stopped, Gone},
		{ociemu.Terminated, Gone},
	} {
		if err := f.emu.SetLifecycleState(inst.ID, c.state); err != nil {
			t.Fatal(err)
		}
		d, err := f.p.Describe(ctx, ociAD, inst.ID)
		if err != nil || d.State != c.want {
			t.Errorf("%s: Describe = %v, %v; want %v", c.state, d.State, err, c.want)
		}
		if c.want != Running && d.Running.GetPrivateIpAddress() != "" {
			t.Errorf("%s: addresses before running: %v", c.state, d.Running)
		}
	}
	// A stopped instance is still found (so that it can be terminated),
	// as Gone.
	if err := f.emu.SetLifecycleState(inst.ID, ociemu.Stopped); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := f.p.Find(ctx, ociAD, "node-s"); err != nil || !ok || got.State != Gone {
		t.Errorf("Find(stopped) = %+v, %v, %v", got, ok, err)
	}
}

func TestOCIImageByArchitecture(t *testing.T) {
	x86 := ociemu.ImageID("Canonical-Ubuntu-24.04-2024.10.09-0")
	arm := ociemu.ImageID("Canonical-Ubuntu-24.04-aarch64-2024.10.09-0")
	for _, c := range []struct {
		name, arch, shape string
		mod               func(*OCIConfig)
		image             string
		ocpus             float64
	}{
		{name: "x86 flex", arch: "x86_64", shape: "VM.Standard.E4.Flex", image: x86, ocpus: 2},
		{name: "amd64 fixed shape", arch: "amd64", shape: "VM.Standard2.1", image: x86},
		{name: "arm64 A1", arch: "arm64", shape: "VM.Standard.A1.Flex", image: arm, ocpus: 2},
		{name: "aarch64 A2", arch: "aarch64", shape: "VM.Standard.A2.Flex", image: arm, ocpus: 2},
		{name: "any arch on arm shape", arch: "", shape: "VM.Standard.A1.Flex", image: arm, ocpus: 2},
		{name: "operating system", arch: "x86_64", shape: "VM.Standard.E5.Flex", image: ociemu.ImageID("Oracle-Linux-9.4-2024.09.30-0"), ocpus: 2,
			mod: func(c *OCIConfig) { c.ImageOperatingSystem = "Oracle Linux" }},
		{name: "operating system version", arch: "aarch64", shape: "VM.Standard.A1.Flex", image: ociemu.ImageID("Canonical-Ubuntu-22.04-aarch64-2024.10.04-0"), ocpus: 2,
			mod: func(c *OCIConfig) {
				c.ImageOperatingSystem, c.ImageOperatingSystemVersion = "Canonical Ubuntu", "22.04"
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newOCIFixture(t, ociemu.Options{}, c.mod)
			if _, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-a", c.arch, c.shape)); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			lr, _ := f.emu.LastLaunch()
			if lr.ImageID != c.image || lr.Shape != c.shape || lr.OCPUs != c.ocpus {
				t.Errorf("launched image %s shape %s OCPUs %v; want %s %s %v", lr.ImageID, lr.Shape, lr.OCPUs, c.image, c.shape, c.ocpus)
			}
		})
	}

	t.Run("tagged custom image and no Windows", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, nil)
		now := time.Now()
		f.emu.AddImage(ociemu.Image{DisplayName: "norsk-worker-arm", OperatingSystem: "Canonical Ubuntu", OperatingSystemVersion: "24.04",
			Shapes: ociemu.ArmShapes, FreeformTags: map[string]string{"architecture": "aarch64"}, TimeCreated: now})
		f.emu.AddImage(ociemu.Image{DisplayName: "Windows-Server-2022-Standard-Edition-VM-2025.01.01-0", OperatingSystem: "Windows",
			OperatingSystemVersion: "Server 2022 Standard", Shapes: ociemu.X86Shapes, TimeCreated: now})
		ctx := ctxT(t, 30*time.Second)
		if _, err := f.p.Launch(ctx, ociSpec("node-arm", "arm64", "VM.Standard.A1.Flex")); err != nil {
			t.Fatal(err)
		}
		if lr, _ := f.emu.LastLaunch(); lr.ImageID != ociemu.ImageID("norsk-worker-arm") {
			t.Errorf("arm image %s, want the tagged custom image", lr.ImageID)
		}
		if _, err := f.p.Launch(ctx, ociSpec("node-x86", "x86_64", "VM.Standard.E4.Flex")); err != nil {
			t.Fatal(err)
		}
		if lr, _ := f.emu.LastLaunch(); lr.ImageID != ociemu.ImageID("Canonical-Ubuntu-24.04-2024.10.09-0") {
			t.Errorf("x86 image %s, want the newest non-Windows one", lr.ImageID)
		}
	})

	for _, c := range []struct{ name, arch, shape string }{
		{"arm on x86 shape", "aarch64", "VM.Standard.E4.Flex"},
		{"x86 on arm shape", "x86_64", "VM.Standard.A1.Flex"},
		{"unknown shape", "x86_64", "VM.Nonexistent.Flex"},
	} {
		t.Run("no image: "+c.name, func(t *testing.T) {
			f := newOCIFixture(t, ociemu.Options{}, nil)
			_, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-x", c.arch, c.shape))
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("Launch: %v, want ErrRejected", err)
			}
			if !strings.Contains(err.Error(), c.arch) || !strings.Contains(err.Error(), c.shape) {
				t.Errorf("error %q does not name architecture %s and shape %s", err, c.arch, c.shape)
			}
			if n := f.emu.Calls(ociemu.OpLaunchInstance); n != 0 {
				t.Errorf("%d LaunchInstance calls, want 0", n)
			}
		})
	}

	t.Run("unknown architecture", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, nil)
		_, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-x", "sparc64", "VM.Standard.E4.Flex"))
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "sparc64") {
			t.Fatalf("Launch: %v, want ErrRejected naming sparc64", err)
		}
		if len(f.emu.Requests()) != 0 {
			t.Errorf("%d requests, want none", len(f.emu.Requests()))
		}
	})

	t.Run("flex shape without OCPUs", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, func(c *OCIConfig) { c.ShapeOCPUs = 0 })
		_, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-x", "x86_64", "VM.Standard.E4.Flex"))
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("Launch: %v, want ErrRejected", err)
		}
	})
}

func TestOCIIdempotentRetryToken(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{}, nil)
	ctx := ctxT(t, 30*time.Second)
	a, err := f.p.Launch(ctx, ociSpec("node-i", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.p.Launch(ctx, ociSpec("node-i", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID {
		t.Errorf("two launches of one node: %s and %s", a.ID, b.ID)
	}
	if n := len(f.emu.InstancesTagged(NodeIDTag, "node-i")); n != 1 {
		t.Errorf("%d instances for the node, want 1", n)
	}
	ls := f.emu.Launches()
	if len(ls) != 2 || ls[0].RetryToken != ls[1].RetryToken {
		t.Fatalf("launches %d, tokens differ or missing: %+v", len(ls), ls)
	}
	if n := f.emu.Calls(ociemu.OpListImages); n != 1 {
		t.Errorf("%d ListImages calls, want 1 (the choice is cached)", n)
	}

	// Another node: another token, another instance.
	c, err := f.p.Launch(ctx, ociSpec("node-j", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == a.ID {
		t.Error("another node got the same instance")
	}
	// Node ids that do not fit a token are hashed.
	long := strings.Repeat("n", 100)
	if tok := ociRetryToken(long); len(tok) > ociemu.MaxRetryTokenLength || tok == ociRetryToken(long+"x") {
		t.Errorf("token of a long id: %q", tok)
	}
	if _, err := f.p.Launch(ctx, ociSpec(long, "x86_64", "VM.Standard.E4.Flex")); err != nil {
		t.Errorf("Launch with a long node id: %v", err)
	}
}

func TestOCIRelaunchAfterRestartWithNewerImage(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{}, nil)
	ctx := ctxT(t, 30*time.Second)
	a, err := f.p.Launch(ctx, ociSpec("node-r", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatal(err)
	}
	// A newer image appears and the manager restarts (no image cache): the
	// relaunch's body differs, OCI answers 409 Conflict for the token, and
	// the provider finds the node's instance by its tag.
	f.emu.AddImage(ociemu.Image{DisplayName: "Canonical-Ubuntu-24.04-2099.01.01-0", OperatingSystem: "Canonical Ubuntu",
		OperatingSystemVersion: "24.04", Shapes: ociemu.X86Shapes, TimeCreated: time.Now()})
	p2 := f.provider(t, nil)
	b, err := p2.Launch(ctx, ociSpec("node-r", "x86_64", "VM.Standard.E4.Flex"))
	if err != nil {
		t.Fatalf("relaunch: %v", err)
	}
	if b.ID != a.ID {
		t.Errorf("relaunch gave %s, want %s", b.ID, a.ID)
	}
	ls := f.emu.Launches()
	if len(ls) != 2 || ls[1].Error == nil || ls[1].Error.Code != "Conflict" {
		t.Errorf("second launch: %+v, want 409 Conflict", ls[len(ls)-1])
	}
	if n := len(f.emu.Instances()); n != 1 {
		t.Errorf("%d instances, want 1", n)
	}
}

func TestOCILostLaunchResponse(t *testing.T) {
	t.Run("retried with the same token", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, nil)
		f.emu.LoseLaunchResponses(1, nil) // the connection drops
		inst, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-l", "x86_64", "VM.Standard.E4.Flex"))
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		ls := f.emu.Launches()
		if len(ls) != 2 || ls[0].InstanceID != inst.ID || ls[1].InstanceID != inst.ID || ls[0].RetryToken != ls[1].RetryToken {
			t.Errorf("launches %+v, want two with one token and instance %s", ls, inst.ID)
		}
		if n := len(f.emu.Instances()); n != 1 {
			t.Errorf("%d instances, want 1", n)
		}
	})

	t.Run("every answer lost", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, nil)
		f.emu.LoseLaunchResponses(1000, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := f.p.Launch(ctx, ociSpec("node-l", "x86_64", "VM.Standard.E4.Flex"))
		if err == nil || errors.Is(err, ErrCapacity) || errors.Is(err, ErrRejected) {
			t.Fatalf("Launch: %v, want a transient error", err)
		}
		if f.emu.Calls(ociemu.OpLaunchInstance) < 2 {
			t.Errorf("%d LaunchInstance calls, want retries", f.emu.Calls(ociemu.OpLaunchInstance))
		}
		inst, ok, err := f.p.Find(ctxT(t, 30*time.Second), ociAD, "node-l")
		if err != nil || !ok {
			t.Fatalf("Find = %v, %v", ok, err)
		}
		all := f.emu.Instances()
		if len(all) != 1 || all[0].ID != inst.ID {
			t.Errorf("instances %+v, want only %s", all, inst.ID)
		}
	})

	t.Run("lost as out of capacity", func(t *testing.T) {
		f := newOCIFixture(t, ociemu.Options{}, nil)
		f.emu.LoseLaunchResponses(1, &ociemu.ErrOutOfCapacity)
		_, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-l", "x86_64", "VM.Standard.E4.Flex"))
		if !errors.Is(err, ErrCapacity) {
			t.Fatalf("Launch: %v, want ErrCapacity", err)
		}
		if _, ok, err := f.p.Find(ctxT(t, 30*time.Second), ociAD, "node-l"); err != nil || !ok {
			t.Fatalf("Find = %v, %v", ok, err)
		}
	})
}

func TestOCIThrottled(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{}, nil)
	f.emu.FailNext(ociemu.OpListImages, 1, ociemu.ErrTooManyRequests)
	f.emu.FailNext(ociemu.OpLaunchInstance, 2, ociemu.ErrTooManyRequests)
	if _, err := f.p.Launch(ctxT(t, 30*time.Second), ociSpec("node-t", "x86_64", "VM.Standard.E4.Flex")); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if n := f.emu.Calls(ociemu.OpListImages); n != 2 {
		t.Errorf("%d ListImages calls, want 2", n)
	}
	if n := f.emu.Calls(ociemu.OpLaunchInstance); n != 3 {
		t.Errorf("%d LaunchInstance calls, want 3", n)
	}
	if h := healthOf(f.health, ociAD); h != managerpb.Health_UNSTABLE {
		t.Errorf("health %v, want UNSTABLE", h)
	}
	// The retries were the provider's, not the SDK's.
	for i, r := range f.http.clientRetries() {
		if r != "false" {
			t.Errorf("request %d: opc-client-retries %q", i, r)
		}
	}

	// Throttling until ctx ends gives up with the cloud's error.
	f.emu.FailNext(ociemu.OpGetInstance, 1000, ociemu.ErrTooManyRequests)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := f.p.Describe(ctx, ociAD, "ocid1.instance.oc1.emu.x")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "TooManyRequests") {
		t.Errorf("Describe while throttled: %v", err)
	}
}

func TestOCICapacity(t *testing.T) {
	var mu sync.Mutex
	var changes []managerpb.Health
	f := newOCIFixture(t, ociemu.Options{}, nil)
	f.health = NewHealth(time.Minute, 3, nil, func(loc string, h managerpb.Health) {
		mu.Lock()
		defer mu.Unlock()
		if loc == ociAD {
			changes = append(changes, h)
		}
	})
	f.p = f.provider(t, nil)
	ctx := ctxT(t, 30*time.Second)

	f.emu.FailNext(ociemu.OpLaunchInstance, 3, ociemu.ErrOutOfCapacity)
	for i, node := range []string{"node-c1", "node-c2", "node-c3"} {
		_, err := f.p.Launch(ctx, ociSpec(node, "x86_64", "VM.Standard.E4.Flex"))
		if !errors.Is(err, ErrCapacity) || errors.Is(err, ErrRejected) {
			t.Fatalf("%s: Launch: %v, want ErrCapacity", node, err)
		}
		if !strings.Contains(err.Error(), "Out of host capacity") {
			t.Errorf("error %q does not say why", err)
		}
		if n := f.emu.Calls(ociemu.OpLaunchInstance); n != i+1 {
			t.Errorf("%d LaunchInstance calls after %d launches: capacity was retried", n, i+1)
		}
		want := managerpb.Health_UNSTABLE
		if i == 2 {
			want = managerpb.Health_FAILED
		}
		if h := healthOf(f.health, ociAD); h != want {
			t.Errorf("after %d capacity errors: health %v, want %v", i+1, h, want)
		}
	}
	mu.Lock()
	if len(changes) != 2 || changes[0] != managerpb.Health_UNSTABLE || changes[1] != managerpb.Health_FAILED {
		t.Errorf("health changes %v, want UNSTABLE, FAILED", changes)
	}
	mu.Unlock()
	if h := healthOf(f.health, "EMU:TEST-AD-2"); h != -1 {
		t.Errorf("another AD has health %v", h)
	}

	// A service limit is no capacity either.
	f.emu.FailNext(ociemu.OpLaunchInstance, 1, ociemu.ErrLimitExceeded)
	if _, err := f.p.Launch(ctx, ociSpec("node-c4", "x86_64", "VM.Standard.E4.Flex")); !errors.Is(err, ErrCapacity) {
		t.Errorf("LimitExceeded: %v, want ErrCapacity", err)
	}
	if n := f.emu.Calls(ociemu.OpLaunchInstance); n != 4 {
		t.Errorf("%d LaunchInstance calls, want 4", n)
	}

	// Other 5xx are outages, retried; a success resets the count.
	f.emu.FailNext(ociemu.OpLaunchInstance, 1, ociemu.ErrInternal)
	f.emu.FailNext(ociemu.OpLaunchInstance, 1, ociemu.ErrServiceUnavailable)
	if _, err := f.p.Launch(ctx, ociSpec("node-c5", "x86_64", "VM.Standard.E4.Flex")); err != nil {
		t.Fatalf("Launch after outage: %v", err)
	}
	if n := f.emu.Calls(ociemu.OpLaunchInstance); n != 7 {
		t.Errorf("%d LaunchInstance calls, want 7", n)
	}
	if h := healthOf(f.health, ociAD); h != managerpb.Health_UNSTABLE {
		t.Errorf("health after recovery %v, want UNSTABLE (within the window)", h)
	}
}

func TestOCIRejected(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{Subnets: []string{ociemu.DefaultSubnet}}, nil)
	ctx := ctxT(t, 30*time.Second)
	spec := ociSpec("node-x", "x86_64", "VM.Standard.E4.Flex")
	spec.OCI.Subnet = "ocid1.subnet.oc1.emu.other"
	if _, err := f.p.Launch(ctx, spec); !errors.Is(err, ErrRejected) {
		t.Errorf("unknown subnet: %v, want ErrRejected", err)
	}
	spec = ociSpec("node-x", "x86_64", "VM.Standard.E4.Flex")
	spec.OCI.AvailabilityDomain = "EMU:NO-SUCH-AD"
	if _, err := f.p.Launch(ctx, spec); !errors.Is(err, ErrRejected) {
		t.Errorf("unknown AD: %v, want ErrRejected", err)
	}
	if n := f.emu.Calls(ociemu.OpLaunchInstance); n != 2 {
		t.Errorf("%d LaunchInstance calls, want 2 (no retries)", n)
	}
	for _, mod := range []func(*LaunchSpec){
		func(s *LaunchSpec) { s.OCI = nil },
		func(s *LaunchSpec) { s.NodeID = "" },
		func(s *LaunchSpec) { s.OCI.AvailabilityDomain = "" },
		func(s *LaunchSpec) { s.OCI.Shape = "" },
		func(s *LaunchSpec) { s.OCI.Subnet = "" },
	} {
		s := ociSpec("node-y", "x86_64", "VM.Standard.E4.Flex")
		mod(&s)
		if _, err := f.p.Launch(ctx, s); !errors.Is(err, ErrRejected) {
			t.Errorf("incomplete spec: %v, want ErrRejected", err)
		}
	}
	if h := healthOf(f.health, ociAD); h != managerpb.Health_HEALTHY {
		t.Errorf("health %v after request errors, want HEALTHY", h)
	}
}

func TestOCIKeyMismatch(t *testing.T) {
	var other *ociemu.APIKey
	f := newOCIFixture(t, ociemu.Options{}, func(c *OCIConfig) {
		k, err := ociemu.NewAPIKey(ociemu.DefaultTenancy, ociemu.DefaultUser)
		if err != nil {
			t.Fatal(err)
		}
		other = k
		c.Provider = k.ConfigurationProvider(ociemu.DefaultRegion)
	})
	ctx := ctxT(t, 30*time.Second)
	_, err := f.p.Launch(ctx, ociSpec("node-k", "x86_64", "VM.Standard.E4.Flex"))
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "NotAuthenticated") {
		t.Fatalf("Launch: %v, want ErrRejected (NotAuthenticated)", err)
	}
	if _, _, err := f.p.Find(ctx, ociAD, "node-k"); !errors.Is(err, ErrRejected) {
		t.Errorf("Find: %v, want ErrRejected", err)
	}
	if err := f.p.Terminate(ctx, ociAD, "ocid1.instance.oc1.emu.x"); !errors.Is(err, ErrRejected) {
		t.Errorf("Terminate: %v, want ErrRejected", err)
	}
	if n := len(f.emu.Requests()); n != 3 {
		t.Errorf("%d requests, want 3 (no retries)", n)
	}
	fails := f.emu.AuthFailures()
	if len(fails) != 3 || !strings.Contains(fails[0], "unknown keyId") || !strings.Contains(fails[0], other.Fingerprint()) {
		t.Errorf("auth failures %v", fails)
	}
	if len(f.emu.Instances()) != 0 {
		t.Error("an instance was launched")
	}
}

func TestOCIPagination(t *testing.T) {
	f := newOCIFixture(t, ociemu.Options{PageSize: 1}, nil)
	ctx := ctxT(t, 30*time.Second)
	ids := map[string]string{}
	for _, node := range []string{"node-p1", "node-p2", "node-p3"} {
		inst, err := f.p.Launch(ctx, ociSpec(node, "x86_64", "VM.Standard.E4.Flex"))
		if err != nil {
			t.Fatal(err)
		}
		ids[node] = inst.ID
	}
	if n := f.emu.Calls(ociemu.OpListImages); n < 3 {
		t.Errorf("%d ListImages calls: pages not followed", n)
	}
	if lr, _ := f.emu.LastLaunch(); lr.ImageID != ociemu.ImageID("Canonical-Ubuntu-24.04-2024.10.09-0") {
		t.Errorf("image %s across pages", lr.ImageID)
	}
	for node, id := range ids {
		got, ok, err := f.p.Find(ctx, ociAD, node)
		if err != nil || !ok || got.ID != id {
			t.Errorf("Find(%s) = %+v, %v, %v; want %s", node, got, ok, err, id)
		}
	}
	d, err := f.p.Describe(ctx, ociAD, ids["node-p2"])
	if err != nil || d.State != Running || d.Running.GetPrivateIpAddress() != "127.0.1.2" {
		t.Errorf("Describe = %+v, %v", d, err)
	}
}

func TestNewOCIConfig(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	good := OCIConfig{Provider: emu.ConfigurationProvider(), CompartmentID: ociemu.DefaultCompartment}
	for name, mod := range map[string]func(*OCIConfig){
		"no provider":       func(c *OCIConfig) { c.Provider = nil },
		"no compartment":    func(c *OCIConfig) { c.CompartmentID = "" },
		"endpoint scheme":   func(c *OCIConfig) { c.Endpoint = "ftp://127.0.0.1:1" },
		"endpoint path":     func(c *OCIConfig) { c.Endpoint = emu.URL() + "/20160918" },
		"endpoint not host": func(c *OCIConfig) { c.Endpoint = "127.0.0.1:1" },
	} {
		cfg := good
		mod(&cfg)
		if _, err := NewOCI(cfg); err == nil {
			t.Errorf("%s: NewOCI accepted %+v", name, cfg)
		}
	}
	cfg := good
	cfg.Endpoint = emu.URL() + "/"
	p, err := NewOCI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.compute.Host != emu.URL() || p.network.Host != emu.URL() {
		t.Errorf("hosts %q, %q; want %q", p.compute.Host, p.network.Host, emu.URL())
	}
	if p.Kind() != managerpb.NodeProvider_NODE_PROVIDER_OCI || p.Health() == nil {
		t.Error("Kind or Health")
	}
}
