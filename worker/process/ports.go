package process

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// ephemeralAttempts bounds retries when the OS hands out an ephemeral port
// another job of this runtime has reserved.
const ephemeralAttempts = 16

// portSpec is one resolved port mapping of a service.
type portSpec struct {
	ContainerPort uint32                  `json:"container_port"`
	Protocol      commonpb.ProtocolFamily `json:"protocol"`
	Host          string                  `json:"host"`
	Published     uint32                  `json:"published"`
}

// network returns "udp" for UDP mappings and "tcp" otherwise (TCP and ANY).
func (p portSpec) network() string {
	if p.Protocol == commonpb.ProtocolFamily_UDP {
		return "udp"
	}
	return "tcp"
}

// Proto returns the mapping as reported to the manager.
func (p portSpec) Proto() *commonpb.ResolvedPortMapping {
	return &commonpb.ResolvedPortMapping{
		Url:       p.network() + "://" + net.JoinHostPort(p.Host, strconv.FormatUint(uint64(p.Published), 10)),
		Target:    p.ContainerPort,
		Published: p.Published,
		Protocol:  p.Protocol,
	}
}

// networks returns the transport protocols a mapping occupies: both for
// ANY.
func networks(proto commonpb.ProtocolFamily) []string {
	switch proto {
	case commonpb.ProtocolFamily_TCP:
		return []string{"tcp"}
	case commonpb.ProtocolFamily_UDP:
		return []string{"udp"}
	default:
		return []string{"tcp", "udp"}
	}
}

// portKey identifies a reserved host port. The host address is left out on
// purpose: a port reserved on one address is not handed out on another.
type portKey struct {
	network string
	port    uint32
}

func validateMapping(pm *commonpb.PortMapping) error {
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
	return nil
}

// reservePortsLocked resolves every port mapping of specs to a host port
// free on this host and not reserved by another job, records it in
// r.mu.ports for key, and fills spec.Ports. On error nothing stays
// reserved. Caller holds r.mu.
func (r *Runtime) reservePortsLocked(key worker.JobKey, specs []*serviceSpec) error {
	var taken []portKey
	fail := func(err error) error {
		for _, k := range taken {
			delete(r.mu.ports, k)
		}
		return err
	}
	for _, spec := range specs {
		spec.Ports = spec.Ports[:0]
		for _, pm := range spec.mappings {
			ps := portSpec{ContainerPort: pm.GetContainerPort(), Protocol: pm.GetProtocol(), Host: pm.GetHostAddress()}
			if ps.Host == "" {
				ps.Host = r.cfg.DefaultHostAddress
			}
			port, err := r.pickPortLocked(pm, ps)
			if err != nil {
				return fail(fmt.Errorf("service %q container port %d: %w", spec.Name, ps.ContainerPort, err))
			}
			ps.Published = port
			for _, n := range networks(ps.Protocol) {
				k := portKey{n, port}
				r.mu.ports[k] = key
				taken = append(taken, k)
			}
			spec.Ports = append(spec.Ports, ps)
		}
	}
	return nil
}

func (r *Runtime) pickPortLocked(pm *commonpb.PortMapping, ps portSpec) (uint32, error) {
	nets := networks(ps.Protocol)
	switch hp := pm.GetHostPort().(type) {
	case *commonpb.PortMapping_Specific:
		p := hp.Specific.GetPort()
		if err := r.portAvailableLocked(nets, ps.Host, p); err != nil {
			return 0, err
		}
		return p, nil
	case *commonpb.PortMapping_Range:
		lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort()
		for p := lo; p <= hi; p++ {
			if r.portAvailableLocked(nets, ps.Host, p) == nil {
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free %s port on %s in %d..%d", nets[0], ps.Host, lo, hi)
	default: // ephemeral, or no host port given
		for range ephemeralAttempts {
			p, err := ephemeralPort(nets[0], ps.Host)
			if err != nil {
				return 0, err
			}
			if r.portAvailableLocked(nets, ps.Host, p) == nil {
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free ephemeral %s port on %s", nets[0], ps.Host)
	}
}

// portAvailableLocked checks that port is not reserved and can be bound on
// host for every network in nets.
func (r *Runtime) portAvailableLocked(nets []string, host string, port uint32) error {
	for _, n := range nets {
		if other, ok := r.mu.ports[portKey{n, port}]; ok {
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

// releasePortsLocked frees every port reserved for key. Caller holds r.mu.
func (r *Runtime) releasePortsLocked(key worker.JobKey) {
	for k, owner := range r.mu.ports {
		if owner == key {
			delete(r.mu.ports, k)
		}
	}
}

// portMappings returns the mappings of specs as reported to the manager.
func portMappings(specs []*serviceSpec) worker.PortMappings {
	out := make(worker.PortMappings, len(specs))
	for _, s := range specs {
		rpm := &commonpb.ResolvedPortMappings{}
		for _, p := range s.Ports {
			rpm.Mappings = append(rpm.Mappings, p.Proto())
		}
		out[s.Name] = rpm
	}
	return out
}
