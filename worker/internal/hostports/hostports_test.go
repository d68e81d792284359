package hostports

import (
	"net"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func specific(c, p uint32) *commonpb.PortMapping {
	return &commonpb.PortMapping{ContainerPort: c, Protocol: commonpb.ProtocolFamily_TCP,
		HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: p}}}
}

func TestTable_ReserveHoldRelease(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := uint32(l.Addr().(*net.TCPAddr).Port)

	tab := NewTable()
	a := worker.JobKey{JobID: "a", Role: "primary"}
	b := worker.JobKey{JobID: "b", Role: "primary"}
	got, err := tab.Reserve(a, "127.0.0.1", []*commonpb.PortMapping{{ContainerPort: 80}})
	if err != nil || len(got) != 1 || got[0].Published == 0 || got[0].Host != "127.0.0.1" {
		t.Fatalf("ephemeral: %v %v", got, err)
	}
	if u := got[0].Proto().GetUrl(); !strings.HasPrefix(u, "tcp://127.0.0.1:") {
		t.Fatalf("url = %s", u)
	}
	// The same port for another owner is refused, naming the owner.
	if _, err := tab.Reserve(b, "127.0.0.1", []*commonpb.PortMapping{specific(80, got[0].Published)}); err == nil || !strings.Contains(err.Error(), "a/primary") {
		t.Fatalf("reserved port handed out again: %v", err)
	}
	// A port another program holds is refused and nothing stays reserved.
	if _, err := tab.Reserve(b, "127.0.0.1", []*commonpb.PortMapping{{ContainerPort: 81}, specific(82, busy)}); err == nil || !strings.Contains(err.Error(), "not free") {
		t.Fatalf("busy port: %v", err)
	}
	for k, o := range tab.owner {
		if o == b {
			t.Fatalf("port %v still reserved for b after a failed Reserve", k)
		}
	}
	tab.Release(a)
	if _, err := tab.Reserve(b, "127.0.0.1", []*commonpb.PortMapping{specific(80, got[0].Published)}); err != nil {
		t.Fatalf("released port: %v", err)
	}
	tab.Hold(a, []Mapping{{ContainerPort: 1, Protocol: commonpb.ProtocolFamily_ANY, Host: "127.0.0.1", Published: 9}})
	if len(tab.owner) != 3 {
		t.Fatalf("Hold of ANY should reserve tcp and udp: %v", tab.owner)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		pm   *commonpb.PortMapping
		want string
	}{
		{&commonpb.PortMapping{ContainerPort: 0}, "container_port"},
		{specific(80, 70000), "specific port"},
		{&commonpb.PortMapping{ContainerPort: 80, HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: 9, MaxPort: 8}}}, "range"},
		{&commonpb.PortMapping{ContainerPort: 80, HostAddress: "localhost"}, "host_address"},
		{specific(80, 8080), ""},
	}
	for _, tt := range tests {
		err := Validate(tt.pm)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%v) = %v, want %q", tt.pm, err, tt.want)
		}
	}
}
