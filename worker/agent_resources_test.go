package worker_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/worker"
)

// The resources of Config.Resources (the worker's --capacity, --zone…
// flags) travel in the registration and in every hello, so that the
// manager can replace what it stored for the node.
func TestAgent_Resources_InRegistrationAndHello(t *testing.T) {
	arm := commonpb.Architecture_AARCH_64
	res := &commonpb.NodeResources{Capacity: 3.5, GpuCapacity: 2, GpuModel: "nvidia-l4",
		Capabilities: map[string]string{"nvenc": "true"}, Zone: "z1",
		Cores: []uint32{2, 3, 4, 5, 6, 7}, Architecture: &arm, Shape: "bare-metal-32", Subnet: "lan-2"}
	a, m, _ := registeredAgent(t, func(c *worker.Config) { c.Resources = res })
	if got := m.waitRequests(t, 1)[0].GetResources(); !proto.Equal(got, res) {
		t.Errorf("registration resources = %v, want %v", got, res)
	}
	for i := range 2 { // every session's hello, not only the first
		s := dialSession(t, a.Addr().String(), "node-1", "n1")
		if got := s.hello(t).GetResources(); !proto.Equal(got, res) {
			t.Errorf("hello %d resources = %v, want %v", i, got, res)
		}
		s.cancel()
	}
}

// A worker configured without resources (as one that predates them)
// sends none: the manager keeps its capacity unknown.
func TestAgent_Resources_NoneConfigured(t *testing.T) {
	a, m, _ := registeredAgent(t, func(c *worker.Config) { c.Resources = nil })
	if got := m.waitRequests(t, 1)[0].GetResources(); got != nil {
		t.Errorf("registration resources = %v, want none", got)
	}
	s := dialSession(t, a.Addr().String(), "node-1", "n1")
	if got := s.hello(t).GetResources(); got != nil {
		t.Errorf("hello resources = %v, want none", got)
	}
}

// DefaultConfig derives the capacity from the host's cores, offers the
// CPUs this process may run on as cores, reports the binary's
// architecture and names no GPU, capability, zone, shape or subnet.
func TestDefaultConfig_Resources(t *testing.T) {
	r := worker.DefaultConfig().Resources
	if r.GetCapacity() < 0.5 || r.GetGpuCapacity() != 0 || r.GetGpuModel() != "" || len(r.GetCapabilities()) != 0 || r.GetZone() != "" ||
		r.GetShape() != "" || r.GetSubnet() != "" {
		t.Fatalf("default resources %v", r)
	}
	cpus, err := worker.AllowedCPUs()
	if err != nil || !slices.Equal(r.GetCores(), cpus) || len(cpus) == 0 {
		t.Fatalf("default cores %v; want the affinity mask %v (%v)", r.GetCores(), cpus, err)
	}
	if arch, ok := noderesources.HostArchitecture(); ok && (r.Architecture == nil || r.GetArchitecture() != arch) {
		t.Fatalf("default architecture %v; want %v", r.Architecture, arch)
	}
	if err := noderesources.Validate(r); err != nil {
		t.Fatalf("default resources invalid: %v", err)
	}
}
