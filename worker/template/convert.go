package template

import (
	"fmt"
	"math"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

// toStack converts a loaded compose project into a Stack (without the
// template's name and launch config), refusing values the runtime cannot
// run; errors name the service and key.
func toStack(p *types.Project) (*Stack, error) {
	st := &Stack{}
	for _, name := range sortedNames(p.Volumes) {
		st.Volumes = append(st.Volumes, name)
	}
	nets := map[string]bool{}
	for name := range p.Networks {
		nets[name] = true
	}
	for _, name := range sortedNames(p.Services) {
		svc, err := toService(p, p.Services[name])
		if err != nil {
			return nil, fmt.Errorf("services.%s.%w", name, err)
		}
		for _, n := range svc.Networks {
			nets[n.Name] = true
		}
		st.Services = append(st.Services, svc)
	}
	st.Networks = sortedNames(nets)
	return st, nil
}

func toService(p *types.Project, s types.ServiceConfig) (Service, error) {
	out := Service{
		Name:       s.Name,
		Image:      s.Image,
		Entrypoint: cloneStrings(s.Entrypoint),
		Command:    cloneStrings(s.Command),
		ShmSize:    int64(s.ShmSize),
		CPUSet:     s.CPUSet,
	}
	if out.Image == "" {
		return out, fmt.Errorf("image: required (set it, or the variable it names)")
	}
	for k, v := range s.Environment {
		if v != nil { // a bare KEY nobody sets is left out, as compose does
			out.Environment = append(out.Environment, k+"="+*v)
		}
	}
	sort.Strings(out.Environment)
	var err error
	if out.Restart, err = restartPolicy(s.Restart); err != nil {
		return out, err
	}
	if out.Ports, err = ports(s.Ports); err != nil {
		return out, err
	}
	if out.Volumes, err = volumes(s.Volumes); err != nil {
		return out, err
	}
	if out.Configs, err = configs(p, s.Configs); err != nil {
		return out, err
	}
	if out.DependsOn, err = dependsOn(s.DependsOn); err != nil {
		return out, err
	}
	for _, n := range sortedNames(s.Networks) {
		a := NetworkAttachment{Name: n}
		if cfg := s.Networks[n]; cfg != nil {
			a.Aliases = cloneStrings(cfg.Aliases)
		}
		out.Networks = append(out.Networks, a)
	}
	out.Healthcheck = healthcheck(s.HealthCheck)
	return out, nil
}

// restartPolicy checks compose's restart values; empty is "no".
func restartPolicy(r string) (string, error) {
	switch r {
	case "", "no":
		return "no", nil
	case "always", "unless-stopped", "on-failure":
		return r, nil
	}
	if n, ok := strings.CutPrefix(r, "on-failure:"); ok {
		// The runtime counts restarts in 32 bits (docker.restartOf).
		if _, err := strconv.ParseUint(n, 10, 32); err == nil {
			return r, nil
		}
	}
	return "", fmt.Errorf("restart: %q is not supported: want no, always, unless-stopped, on-failure or on-failure:N", r)
}

func ports(in []types.ServicePortConfig) ([]Port, error) {
	var out []Port
	for i, p := range in {
		if p.Target == 0 || p.Target > 65535 {
			return nil, fmt.Errorf("ports[%d]: container port %d out of range 1-65535", i, p.Target)
		}
		port := Port{HostIP: p.HostIP, ContainerPort: uint16(p.Target), Protocol: p.Protocol}
		if port.Protocol == "" {
			port.Protocol = "tcp"
		}
		if port.Protocol != "tcp" && port.Protocol != "udp" {
			return nil, fmt.Errorf("ports[%d]: protocol %q: want tcp or udp", i, p.Protocol)
		}
		if p.Published != "" {
			hp, err := strconv.ParseUint(p.Published, 10, 16)
			if err != nil || hp == 0 {
				return nil, fmt.Errorf("ports[%d]: published %q: want one host port 1-65535 (ranges are not supported)", i, p.Published)
			}
			port.HostPort = uint16(hp)
		}
		out = append(out, port)
	}
	return out, nil
}

func volumes(in []types.ServiceVolumeConfig) ([]Volume, error) {
	var out []Volume
	for i, v := range in {
		if v.Type != VolumeNamed && v.Type != VolumeBind {
			return nil, fmt.Errorf("volumes[%d]: type %q is not supported: want %s or %s", i, v.Type, VolumeNamed, VolumeBind)
		}
		if v.Source == "" {
			return nil, fmt.Errorf("volumes[%d]: anonymous volumes are not supported: name the volume (NAME:%s) and declare it under volumes", i, v.Target)
		}
		if !path.IsAbs(v.Target) {
			return nil, fmt.Errorf("volumes[%d]: target %q must be an absolute path", i, v.Target)
		}
		if b := v.Bind; b != nil && (b.SELinux != "" || b.Propagation != "") {
			return nil, fmt.Errorf("volumes[%d]: bind options (SELinux relabelling, propagation) are not supported", i)
		}
		if vv := v.Volume; vv != nil && (vv.NoCopy || vv.Subpath != "") {
			return nil, fmt.Errorf("volumes[%d]: volume options (nocopy, subpath) are not supported", i)
		}
		out = append(out, Volume{Type: v.Type, Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return out, nil
}

func configs(p *types.Project, in []types.ServiceConfigObjConfig) ([]ConfigMount, error) {
	var out []ConfigMount
	for i, c := range in {
		def, ok := p.Configs[c.Source]
		if !ok {
			return nil, fmt.Errorf("configs[%d]: config %q is not declared under configs", i, c.Source)
		}
		if def.File == "" {
			return nil, fmt.Errorf("configs[%d]: config %q: only configs from a file are supported", i, c.Source)
		}
		if st, err := os.Stat(def.File); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("configs[%d]: config %q: file %s is missing or not a regular file", i, c.Source, def.File)
		}
		target := c.Target
		if target == "" {
			target = "/" + c.Source
		}
		if !path.IsAbs(target) {
			return nil, fmt.Errorf("configs[%d]: target %q must be an absolute path", i, target)
		}
		out = append(out, ConfigMount{Source: def.File, Target: target})
	}
	return out, nil
}

func dependsOn(in types.DependsOnConfig) ([]Dependency, error) {
	ours := map[string]string{
		"":                   ConditionStarted,
		composeConditions[0]: ConditionStarted,
		composeConditions[1]: ConditionHealthy,
		composeConditions[2]: ConditionCompletedSuccessfully,
	}
	var out []Dependency
	for _, name := range sortedNames(in) {
		cond, ok := ours[in[name].Condition]
		if !ok {
			return nil, fmt.Errorf("depends_on.%s.condition: %q: want %s", name, in[name].Condition, strings.Join(composeConditions[:], ", "))
		}
		out = append(out, Dependency{Service: name, Condition: cond})
	}
	return out, nil
}

func healthcheck(h *types.HealthCheckConfig) *Healthcheck {
	if h == nil {
		return nil
	}
	dur := func(d *types.Duration) time.Duration {
		if d == nil {
			return 0
		}
		return time.Duration(*d)
	}
	out := &Healthcheck{
		Test:        cloneStrings(h.Test),
		Interval:    dur(h.Interval),
		Timeout:     dur(h.Timeout),
		StartPeriod: dur(h.StartPeriod),
		Disabled:    h.Disable || (len(h.Test) == 1 && h.Test[0] == "NONE"),
	}
	if h.Retries != nil {
		out.Retries = int(min(*h.Retries, math.MaxInt32))
	}
	return out
}

func cloneStrings[S ~[]string](s S) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}
