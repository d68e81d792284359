// Package hostports resolves the port_mappings of a job's services
// (common.PortMapping of the 1.0.384 wire format) to host ports and keeps
// the table of ports the runtimes of one worker have reserved, so that two
// jobs are never handed the same port. The process and the Docker
// runtimes share it; docs/design/worker-process-runtime.md §3 gives the
// rules.
package hostports

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// ephemeralAttempts bounds retries when the OS hands out an ephemeral port
// another job has reserved.
const ephemeralAttempts = 16

// Mapping is one resolved port mapping of a service. Its JSON form is
// stored in the runtimes' job records.
type Mapping struct {
	ContainerPort uint32                  `json:"container_port"`
	Protocol      commonpb.ProtocolFamily `json:"protocol"`
	Host          string                  `json:"host"`
	Published     uint32                  `json:"published"`
}

// Network returns "udp" for UDP mappings and "tcp" otherwise (TCP and ANY).
func (p Mapping) Network() string {
	if p.Protocol == commonpb.ProtocolFamily_UDP {
		return "udp"
	}
	return "tcp"
}

// Proto returns the mapping as reported to the manager in job_started:
// url "tcp://host:port" (udp:// for UDP), target the container port,
// published the host port.
func (p Mapping) Proto() *commonpb.ResolvedPortMapping {
	return &commonpb.ResolvedPortMapping{
		Url:       p.Network() + "://" + net.JoinHostPort(p.Host, strconv.FormatUint(uint64(p.Published), 10)),
		Target:    p.ContainerPort,
		Published: p.Published,
		Protocol:  p.Protocol,
	}
}

// Networks returns the transport protocols a mapping occupies: "tcp",
// "udp", or both for ANY.
func Networks(proto commonpb.ProtocolFamily) []string {
	switch proto {
	case commonpb.ProtocolFamily_TCP:
		return []string{"tcp"}
	case commonpb.ProtocolFamily_UDP:
		return []string{"udp"}
	default:
		return []string{"tcp", "udp"}
	}
}

// Validate checks one requested mapping: container_port in 1..65535, a
// specific port in 1..65535, a range within 1..65535 with min <= max, and
// host_address empty or an IP address. The error names the field.
func Validate(pm *commonpb.PortMapping) error {
	if pm.GetContainerPort() == 0 || pm.GetContainerPort() > 65535 {
		return fmt.Errorf("container_port %d is not in 1..65535", pm.GetContainerPort())
	}
	switch hp := pm.GetHostPort().(type) {
	case *commonpb.PortMapping_Specific:
		if p := hp.Specific.GetPort(); p == 0 || p > 65535 {
			return fmt.Errorf("specific port %d is not in 1..65535", p)
		}
	case *commonpb.PortMapping_Range:
		lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort()
		if lo == 0 || hi > 65535 || lo > hi {
			return fmt.Errorf("range %d..%d is not a range within 1..65535", lo, hi)
		}
	}
	if a := pm.GetHostAddress(); a != "" && net.ParseIP(a) == nil {
		return fmt.Errorf("host_address %q is not an IP address", a)
	}
	return nil
}

// key identifies a reserved host port. The host address is left out on
// purpose: a port reserved on one address is not handed out on another.
type key struct {
	network string
	port    uint32
}

// Table is the set of host ports reserved by the jobs of one runtime. The
// zero value is not usable; create it with NewTable. Safe for concurrent
// use.
type Table struct {
	mu    sync.Mutex
	owner map[key]worker.JobKey
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{owner: make(map[key]worker.JobKey)} }

// Reserve resolves mappings (one service's port_mappings, already
// validated) to host ports free on this host and not reserved by another
// owner, and reserves them for owner. A mapping without host_address uses
// defaultHost. Rules: specific → that port, which must be free; range →
// the first free port in [min, max]; ephemeral or none → a port the OS
// hands out. "Free" means bindable now (TCP, UDP or both for ANY). On
// error, the ports reserved by this call are released again and the error
// says which container port failed and why; ports reserved for owner by
// earlier calls stay (call Release).
func (t *Table) Reserve(owner worker.JobKey, defaultHost string, mappings []*commonpb.PortMapping) ([]Mapping, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var taken []key
	out := make([]Mapping, 0, len(mappings))
	for _, pm := range mappings {
		m := Mapping{ContainerPort: pm.GetContainerPort(), Protocol: pm.GetProtocol(), Host: pm.GetHostAddress()}
		if m.Host == "" {
			m.Host = defaultHost
		}
		port, err := t.pickLocked(pm, m)
		if err != nil {
			for _, k := range taken {
				delete(t.owner, k)
			}
			return nil, fmt.Errorf("container port %d: %w", m.ContainerPort, err)
		}
		m.Published = port
		for _, n := range Networks(m.Protocol) {
			k := key{n, port}
			t.owner[k] = owner
			taken = append(taken, k)
		}
		out = append(out, m)
	}
	return out, nil
}

// Hold reserves already resolved mappings for owner without checking that
// they are free (a job re-adopted after a worker restart, whose services
// hold them).
func (t *Table) Hold(owner worker.JobKey, mappings []Mapping) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range mappings {
		for _, n := range Networks(m.Protocol) {
			t.owner[key{n, m.Published}] = owner
		}
	}
}

// Release frees every port reserved for owner.
func (t *Table) Release(owner worker.JobKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, o := range t.owner {
		if o == owner {
			delete(t.owner, k)
		}
	}
}

func (t *Table) pickLocked(pm *commonpb.PortMapping, m Mapping) (uint32, error) {
	nets := Networks(m.Protocol)
	switch hp := pm.GetHostPort().(type) {
	case *commonpb.PortMapping_Specific:
		p := hp.Specific.GetPort()
		if err := t.availableLocked(nets, m.Host, p); err != nil {
			return 0, err
		}
		return p, nil
	case *commonpb.PortMapping_Range:
		lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort()
		for p := lo; p <= hi; p++ {
			if t.availableLocked(nets, m.Host, p) == nil {
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free %s port on %s in %d..%d", nets[0], m.Host, lo, hi)
	default: // ephemeral, or no host port given
		for range ephemeralAttempts {
			p, err := ephemeralPort(nets[0], m.Host)
			if err != nil {
				return 0, err
			}
			if t.availableLocked(nets, m.Host, p) == nil {
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free ephemeral %s port on %s", nets[0], m.Host)
	}
}

// availableLocked checks that port is not reserved and can be bound on
// host for every network in nets.
func (t *Table) availableLocked(nets []string, host string, port uint32) error {
	for _, n := range nets {
		if other, ok := t.owner[key{n, port}]; ok {
			return fmt.Errorf("%s port %d is already used by job %s", n, port, other)
		}
		if err := bindable(n, host, port); err != nil {
			return err
		}
	}
	return nil
}

// bindable reports whether host:port can be bound now.
func bindable(network, host string, port uint32) error {
	addr := net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10))
	var err error
	if network == "udp" {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", addr); err == nil {
			return pc.Close()
		}
	} else {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l.Close()
		}
	}
	return fmt.Errorf("%s port %s is not free: %w", network, addr, err)
}

// ephemeralPort asks the OS for a free port on host.
func ephemeralPort(network, host string) (uint32, error) {
	addr := net.JoinHostPort(host, "0")
	var a net.Addr
	if network == "udp" {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return 0, fmt.Errorf("pick an ephemeral udp port on %s: %w", host, err)
		}
		a = pc.LocalAddr()
		_ = pc.Close()
	} else {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("pick an ephemeral tcp port on %s: %w", host, err)
		}
		a = l.Addr()
		_ = l.Close()
	}
	switch v := a.(type) {
	case *net.TCPAddr:
		return uint32(v.Port), nil
	case *net.UDPAddr:
		return uint32(v.Port), nil
	}
	return 0, errors.New("unexpected listener address type")
}
