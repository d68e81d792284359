package process

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// reservePortsLocked resolves every port mapping of specs to a host port
// (hostports.Table.Reserve) and fills spec.Ports. On error nothing stays
// reserved for key. Caller holds r.mu.
func (r *Runtime) reservePortsLocked(key worker.JobKey, specs []*serviceSpec) error {
	for _, spec := range specs {
		ports, err := r.ports.Reserve(key, r.cfg.DefaultHostAddress, spec.mappings)
		if err != nil {
			r.ports.Release(key)
			return fmt.Errorf("service %q %w", spec.Name, err)
		}
		spec.Ports = ports
	}
	return nil
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
