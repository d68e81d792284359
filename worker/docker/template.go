package docker

import (
	"context"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/distribution/reference"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
	"github.com/norsk-oss/norsk-manager/worker/template"
)

// A job with product_template runs the template's compose stack
// (docs/design/product-templates.md): Catalogue.Resolve turns the job
// into a neutral template.Stack, and this file turns that into the
// runtime's service specs and stack spec, which the shared start path
// (Runtime.start) reserves, creates, records and supervises like a legacy
// job's. Everything a restarted worker needs is in the record — specs,
// the launch config and the config files' contents — so a re-adopted
// stack never depends on the catalogue again.

// maxConfigFile bounds one compose config file: it is copied into the
// job record. Larger data belongs in a volume or a bind mount. (The fused
// launch config is bounded by maxEnvEntry: it is also an environment
// variable.)
const maxConfigFile = 1 << 20

// stackFile is a file of a stack the runtime mounts read-only: the fused
// launch config, or a compose config snapshotted when the job started
// (so that a template edited on disk does not change a running stack).
// Written to StateDir/jobs/<project>/stack/<index> at CREATE; persisted
// in the record (stackSpec.Files).
type stackFile struct {
	Source string `json:"source,omitempty"` // host path it was read from; "" for the launch config
	Data   []byte `json:"data"`
}

// describe names f in errors: "config <host path>" or "the launch config".
func (f stackFile) describe() string {
	if f.Source == "" {
		return "the launch config"
	}
	return "config " + f.Source
}

// resolvedTemplate is a job's template resolved once: the stack and the
// files it mounts (index 0 the launch config, then each config file by
// host path).
type resolvedTemplate struct {
	stack   *template.Stack
	files   []stackFile
	fileIdx map[string]int // host path of a config → index in files
}

// startTemplate is Start for a job with product_template. The template is
// resolved at most once per call, before the runtime's lock is taken when
// the job is not running yet (Resolve reads env_file and config files).
func (r *Runtime) startTemplate(ctx context.Context, def *workerpb.WorkerJob) (worker.PortMappings, error) {
	resolve := sync.OnceValues(func() (*resolvedTemplate, error) { return r.resolveTemplate(ctx, def) })
	if !r.has(worker.KeyOf(def)) {
		_, _ = resolve() // the error is the plan's, reported by start
	}
	return r.start(ctx, def, func() ([]*serviceSpec, *stackSpec, error) {
		rt, err := resolve()
		if err != nil {
			return nil, nil, err
		}
		return planTemplate(def, rt)
	})
}

// has reports whether a job for key is known (running, starting or
// stopping).
func (r *Runtime) has(key worker.JobKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.jobs[key] != nil
}

// resolveTemplate checks that def is a template job only, resolves it
// against the worker's catalogue and reads the stack's config files.
// Errors wrap worker.ErrInvalidJob or worker.ErrTemplateUnavailable.
func (r *Runtime) resolveTemplate(ctx context.Context, def *workerpb.WorkerJob) (*resolvedTemplate, error) {
	if def.GetJobId().GetJobId() == "" {
		return nil, fmt.Errorf("%w: job_id is empty", worker.ErrInvalidJob)
	}
	var legacy []string
	if len(def.GetServices()) > 0 {
		legacy = append(legacy, "services")
	}
	if len(def.GetVolumes()) > 0 {
		legacy = append(legacy, "volumes")
	}
	if len(legacy) > 0 {
		return nil, fmt.Errorf("%w: product_template and %s are both set: a job runs a product template or its own services and volumes, not both",
			worker.ErrInvalidJob, strings.Join(legacy, " and "))
	}
	st, err := r.cfg.Templates.Resolve(ctx, def)
	if err != nil {
		return nil, err
	}
	if n := len(template.LaunchConfigEnv) + 1 + len(st.LaunchConfig); n >= maxEnvEntry {
		return nil, fmt.Errorf("%w: the fused launch config (launch_config_json over template_launch_defaults_json over the template's launchDefaults) is %d bytes; as %s it must be shorter than %d bytes",
			worker.ErrInvalidJob, len(st.LaunchConfig), template.LaunchConfigEnv, maxEnvEntry-len(template.LaunchConfigEnv)-1)
	}
	rt := &resolvedTemplate{stack: st, files: []stackFile{{Data: st.LaunchConfig}}, fileIdx: map[string]int{}}
	for _, svc := range st.Services {
		for _, c := range svc.Configs {
			if _, ok := rt.fileIdx[c.Source]; ok {
				continue
			}
			data, err := readConfig(c.Source)
			if err != nil {
				return nil, fmt.Errorf("%w: template %s %s: services.%s.configs (target %s): %w", worker.ErrInvalidJob, st.Template, st.Version, svc.Name, c.Target, err)
			}
			rt.fileIdx[c.Source] = len(rt.files)
			rt.files = append(rt.files, stackFile{Source: c.Source, Data: data})
		}
	}
	return rt, nil
}

// readConfig reads a config file of a template, at most maxConfigFile
// bytes.
func readConfig(p string) ([]byte, error) {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", p)
	case st.Size() > maxConfigFile:
		return nil, fmt.Errorf("%s is %d bytes, more than %d (use a volume or a bind mount for large files)", p, st.Size(), maxConfigFile)
	}
	return os.ReadFile(p)
}

// planTemplate converts a resolved template into service specs in start
// order and the stack's volumes, networks and files. It returns fresh
// specs on every call (Runtime.start fills them in). Errors wrap
// worker.ErrInvalidJob and name services.NAME.KEY.
func planTemplate(def *workerpb.WorkerJob, rt *resolvedTemplate) ([]*serviceSpec, *stackSpec, error) {
	st := rt.stack
	healthWaited := map[string]bool{}
	for _, svc := range st.Services {
		for _, d := range svc.DependsOn {
			if d.Condition == template.ConditionHealthy {
				healthWaited[d.Service] = true
			}
		}
	}
	specs := make([]*serviceSpec, 0, len(st.Services))
	index := make(map[string]int, len(st.Services))
	for _, svc := range st.Services {
		spec, err := planStackService(st, svc, rt, healthWaited[svc.Name])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: template %s %s: services.%s.%v", worker.ErrInvalidJob, st.Template, st.Version, svc.Name, err)
		}
		index[spec.Name] = len(specs)
		specs = append(specs, spec)
	}
	for _, spec := range specs {
		for _, dep := range spec.DependsOn {
			if _, ok := index[dep]; !ok || dep == spec.Name {
				return nil, nil, fmt.Errorf("%w: template %s %s: services.%s.depends_on: %q is not another service of the template",
					worker.ErrInvalidJob, st.Template, st.Version, spec.Name, dep)
			}
		}
	}
	if err := planFiles(def.GetWriteFiles(), specs, index); err != nil {
		return nil, nil, err
	}
	ordered, err := svcplan.StartOrder(specs, func(s *serviceSpec) string { return s.Name }, func(s *serviceSpec) []string { return s.DependsOn })
	if err != nil {
		return nil, nil, err
	}
	stack := &stackSpec{
		Volumes:  slices.Clone(st.Volumes),
		Networks: slices.Clone(st.Networks),
		Files:    slices.Clone(rt.files),
	}
	return ordered, stack, nil
}

// planStackService converts one service of a stack. healthWaited: a
// dependant waits for it to be healthy, so without a healthcheck of its
// own it gets the image's (HEALTHCHECK) and is watched. Errors name the
// key after "services.NAME.".
func planStackService(st *template.Stack, svc template.Service, rt *resolvedTemplate, healthWaited bool) (*serviceSpec, error) {
	if _, err := reference.ParseNormalizedNamed(svc.Image); err != nil {
		return nil, fmt.Errorf("image: %q is not an image reference: %v", svc.Image, err)
	}
	spec := &serviceSpec{
		Name:       svc.Name,
		Image:      svc.Image,
		Entrypoint: slices.Clone(svc.Entrypoint),
		Cmd:        slices.Clone(svc.Command),
		ShmSize:    svc.ShmSize,
		Labels:     map[string]string{LabelTemplate: st.Template, LabelTemplateVersion: st.Version},
	}
	if spec.Entrypoint != nil && len(spec.Entrypoint) == 0 {
		spec.Entrypoint = []string{""} // compose's `entrypoint: []`: clear the image's (Docker's reset form)
	}
	if len(spec.Cmd) == 0 {
		spec.Cmd = nil // `command: []` runs no arguments, as the image's CMD is not used with an entrypoint
	}
	var err error
	if spec.Restart, spec.RestartCount, err = restartOf(svc.Restart); err != nil {
		return nil, err
	}
	spec.RestartPeriod = svcplan.DefaultRestartPeriod
	for _, kv := range svc.Environment {
		if strings.ContainsRune(kv, 0) || len(kv) >= maxEnvEntry {
			name, _, _ := strings.Cut(kv, "=")
			return nil, fmt.Errorf("environment.%s: a variable must be shorter than %d bytes and hold no NUL", name, maxEnvEntry)
		}
	}
	spec.envVars = slices.Clone(svc.Environment)
	for _, d := range svc.DependsOn {
		spec.DependsOn = append(spec.DependsOn, d.Service)
		if d.Condition != template.ConditionStarted {
			if spec.Conditions == nil {
				spec.Conditions = map[string]string{}
			}
			spec.Conditions[d.Service] = d.Condition
		}
	}
	if spec.mappings, err = stackPorts(svc.Ports); err != nil {
		return nil, err
	}
	if spec.CPUSet, err = stackCPUSet(svc.CPUSet); err != nil {
		return nil, err
	}
	spec.Healthcheck = stackHealthcheck(svc.Healthcheck, healthWaited)
	for _, n := range svc.Networks {
		spec.Networks = append(spec.Networks, networkAttach{Name: n.Name, Aliases: slices.Clone(n.Aliases)})
	}
	return spec, stackMounts(spec, svc, rt)
}

// restartOf maps compose's restart policy onto the runtime's: no →
// NEVER; always and unless-stopped → ALWAYS (the worker never stops a
// service on its own); on-failure → ON_FAILURE; on-failure:N at most N
// restarts (0: the default). Every one within the default window
// (svcplan.DefaultRestartPeriod) and count.
func restartOf(policy string) (commonpb.Service_ServiceRestart, uint32, error) {
	switch policy {
	case "", "no":
		return commonpb.Service_NEVER, svcplan.DefaultRestartCount, nil
	case "always", "unless-stopped":
		return commonpb.Service_ALWAYS, svcplan.DefaultRestartCount, nil
	case "on-failure":
		return commonpb.Service_ON_FAILURE, svcplan.DefaultRestartCount, nil
	}
	if n, ok := strings.CutPrefix(policy, "on-failure:"); ok {
		count, err := strconv.ParseUint(n, 10, 32)
		if err == nil {
			if count == 0 {
				count = svcplan.DefaultRestartCount
			}
			return commonpb.Service_ON_FAILURE, uint32(count), nil
		}
	}
	return 0, 0, fmt.Errorf("restart: %q: want no, always, unless-stopped, on-failure or on-failure:N", policy)
}

// stackPorts turns a service's ports into port mappings the runtime's
// port table resolves as a legacy job's are: a fixed host port is
// reserved as a specific port (it must be free), none picks a free one
// (ephemeral); no host ip means the runtime's DefaultHostAddress.
func stackPorts(ports []template.Port) ([]*commonpb.PortMapping, error) {
	var out []*commonpb.PortMapping
	for i, p := range ports {
		pm := &commonpb.PortMapping{ContainerPort: uint32(p.ContainerPort), HostAddress: p.HostIP, Protocol: commonpb.ProtocolFamily_TCP}
		if p.Protocol == "udp" {
			pm.Protocol = commonpb.ProtocolFamily_UDP
		}
		if p.HostPort != 0 {
			pm.HostPort = &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: uint32(p.HostPort)}}
		} else {
			pm.HostPort = &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}}
		}
		if err := hostports.Validate(pm); err != nil {
			return nil, fmt.Errorf("ports[%d]: %v", i, err)
		}
		out = append(out, pm)
	}
	return out, nil
}

// stackCPUSet validates a compose cpuset ("0-3,6", the kernel's list
// format: noderesources.ParseCPUList) against this host's CPUs and returns
// it in Docker's form ("0,1,2,3,6"); "" is not pinned.
func stackCPUSet(set string) (string, error) {
	if set == "" {
		return "", nil
	}
	cpus, err := noderesources.ParseCPUList(set)
	if err != nil {
		return "", fmt.Errorf("cpuset: %q: want CPU numbers and ranges, e.g. 0-3,6", set)
	}
	n := runtime.NumCPU()
	if i := slices.IndexFunc(cpus, func(c uint32) bool { return int(c) >= n }); i >= 0 {
		return "", fmt.Errorf("cpuset: %q names CPU %d, but this host has CPUs 0-%d", set, cpus[i], n-1)
	}
	return noderesources.FormatCPUList(cpus), nil
}

// stackHealthcheck converts a service's healthcheck. None given: nil (the
// image's applies, unwatched), or, when a dependant waits for the service
// to be healthy, an empty one (the image's HEALTHCHECK, watched; an image
// without one fails that wait, naming both services).
func stackHealthcheck(h *template.Healthcheck, healthWaited bool) *healthcheck {
	if h == nil {
		if healthWaited {
			return &healthcheck{}
		}
		return nil
	}
	return &healthcheck{Test: slices.Clone(h.Test), Interval: h.Interval, Timeout: h.Timeout,
		StartPeriod: h.StartPeriod, Retries: h.Retries, Disable: h.Disabled}
}

// stackMounts sets spec's named volumes, binds, configs and the launch
// config; two mounts at one target are refused.
func stackMounts(spec *serviceSpec, svc template.Service, rt *resolvedTemplate) error {
	targets := map[string]string{path.Clean(template.LaunchConfigPath): "the launch config (mounted by the worker)"}
	claim := func(target, what string) error {
		t := path.Clean(target)
		if other, dup := targets[t]; dup {
			return fmt.Errorf("%s: target %s is also the target of %s", what, t, other)
		}
		targets[t] = what
		return nil
	}
	for i, v := range svc.Volumes {
		what := fmt.Sprintf("volumes[%d]", i)
		if err := claim(v.Target, what); err != nil {
			return err
		}
		switch v.Type {
		case template.VolumeNamed:
			spec.Volumes = append(spec.Volumes, volumeMount{Volume: v.Source, Target: path.Clean(v.Target), ReadOnly: v.ReadOnly})
		case template.VolumeBind:
			spec.Binds = append(spec.Binds, bindMount{Source: v.Source, Target: path.Clean(v.Target), ReadOnly: v.ReadOnly})
		default:
			return fmt.Errorf("%s: type %q is not supported", what, v.Type)
		}
	}
	for i, c := range svc.Configs {
		if err := claim(c.Target, fmt.Sprintf("configs[%d]", i)); err != nil {
			return err
		}
		spec.StackFiles = append(spec.StackFiles, fileMount{Index: rt.fileIdx[c.Source], Path: path.Clean(c.Target)})
	}
	spec.StackFiles = append(spec.StackFiles, fileMount{Index: 0, Path: template.LaunchConfigPath})
	return nil
}
