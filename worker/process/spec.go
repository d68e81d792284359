package process

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// defaultPath is the PATH of services when Config.Environ is nil.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// serviceSpec is how one service is launched: derived from the job
// definition at Start and persisted, so that restarts (and a worker
// restarted after an update_job) launch exactly what was started.
type serviceSpec struct {
	Name          string              `json:"name"`
	Command       string              `json:"command"`
	Env           []string            `json:"env"` // on top of Config.Environ
	Restart       string              `json:"restart"`
	RestartCount  uint32              `json:"restart_count"`  // effective (defaults applied)
	RestartPeriod time.Duration       `json:"restart_period"` // effective (defaults applied)
	DependsOn     []string            `json:"depends_on,omitempty"`
	Ports         []hostports.Mapping `json:"ports,omitempty"`

	mappings []*commonpb.PortMapping // requested mappings; only during Start
}

// planServices validates job's services and returns them in start order
// (dependencies first; otherwise in the order given). Errors wrap
// worker.ErrInvalidJob and name the offending field.
func planServices(job *workerpb.WorkerJob) ([]*serviceSpec, error) {
	if job.GetJobId().GetJobId() == "" {
		return nil, fmt.Errorf("%w: job_id is empty", worker.ErrInvalidJob)
	}
	specs := make([]*serviceSpec, 0, len(job.GetServices()))
	index := make(map[string]int, len(job.GetServices()))
	for i, svc := range job.GetServices() {
		spec, err := planService(i, svc)
		if err != nil {
			return nil, err
		}
		if _, dup := index[spec.Name]; dup {
			return nil, fmt.Errorf("%w: services[%d].name %q is used twice", worker.ErrInvalidJob, i, spec.Name)
		}
		index[spec.Name] = i
		specs = append(specs, spec)
	}
	for i, spec := range specs {
		for _, dep := range spec.DependsOn {
			if _, ok := index[dep]; !ok {
				return nil, fmt.Errorf("%w: services[%d] (%q) depends on unknown service %q", worker.ErrInvalidJob, i, spec.Name, dep)
			}
			if dep == spec.Name {
				return nil, fmt.Errorf("%w: services[%d] (%q) depends on itself", worker.ErrInvalidJob, i, spec.Name)
			}
		}
	}
	if err := validateFiles(job.GetWriteFiles(), index); err != nil {
		return nil, err
	}
	return svcplan.StartOrder(specs, func(s *serviceSpec) string { return s.Name }, func(s *serviceSpec) []string { return s.DependsOn })
}

func planService(i int, svc *commonpb.Service) (*serviceSpec, error) {
	name := svc.GetName()
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: services[%d].name is empty", worker.ErrInvalidJob, i)
	case strings.TrimSpace(svc.GetCommand()) == "":
		what := "no command"
		if img := svc.GetDocker().GetContainerUrl().GetUrl(); img != "" {
			what = fmt.Sprintf("no command (it names the container image %q, which needs the docker runtime)", img)
		}
		return nil, fmt.Errorf("%w: service %q has %s; the process runtime runs services by their command", worker.ErrInvalidJob, name, what)
	}
	spec := &serviceSpec{
		Name:      name,
		Command:   svc.GetCommand(),
		Restart:   svc.GetRestart().String(),
		DependsOn: slices.Clone(svc.GetDependsOn()),
		mappings:  svc.GetParameters().GetPortMappings(),
	}
	spec.RestartCount, spec.RestartPeriod = svcplan.EffectiveRestart(svc)
	for j, ev := range svc.GetParameters().GetEnvironmentVariables() {
		if ev.GetName() == "" || strings.ContainsAny(ev.GetName(), "=\x00") {
			return nil, fmt.Errorf("%w: service %q environment_variables[%d].name %q is not a valid variable name",
				worker.ErrInvalidJob, name, j, ev.GetName())
		}
		spec.Env = append(spec.Env, ev.GetName()+"="+ev.GetValue())
	}
	for j, pm := range spec.mappings {
		if err := hostports.Validate(pm); err != nil {
			return nil, fmt.Errorf("%w: service %q port_mappings[%d]: %v", worker.ErrInvalidJob, name, j, err)
		}
	}
	return spec, nil
}

// validateFiles checks write_files: relative paths that stay inside the
// job's working directory, and known service names.
func validateFiles(files []*commonpb.WriteFile, services map[string]int) error {
	for i, wf := range files {
		p := wf.GetPath()
		if !filepath.IsLocal(p) || strings.ContainsRune(p, 0) {
			return fmt.Errorf("%w: write_files[%d].path %q must be a relative path inside the job's directory (no leading /, no ..)",
				worker.ErrInvalidJob, i, p)
		}
		for _, s := range wf.GetServices() {
			if _, ok := services[s]; !ok {
				return fmt.Errorf("%w: write_files[%d] names unknown service %q", worker.ErrInvalidJob, i, s)
			}
		}
	}
	return nil
}

// serviceEnv returns the job-specific environment of a service: NORSK_JOB_*
// and NORSK_SERVICE_NAME, then the service's environment_variables, then
// NORSK_PORT_<container_port> (and NORSK_PORT_<container_port>_TCP/_UDP)
// for its resolved ports and NORSK_ADDR_<container_port> (host:port, the
// host address to bind), and NORSK_CPU_LIST ("0,2,3": the job's
// norsk_cpu_list, ascending, when it is pinned), which win over anything
// above.
func serviceEnv(key worker.JobKey, spec *serviceSpec, cpus []uint32) []string {
	env := []string{
		"NORSK_JOB_ID=" + string(key.JobID),
		"NORSK_JOB_ROLE=" + key.Role,
		"NORSK_SERVICE_NAME=" + spec.Name,
	}
	env = append(env, spec.Env...)
	seen := map[uint32]bool{}
	for _, p := range spec.Ports {
		port := strconv.FormatUint(uint64(p.Published), 10)
		if !seen[p.ContainerPort] {
			seen[p.ContainerPort] = true
			env = append(env, fmt.Sprintf("NORSK_PORT_%d=%s", p.ContainerPort, port),
				fmt.Sprintf("NORSK_ADDR_%d=%s", p.ContainerPort, net.JoinHostPort(p.Host, port)))
		}
		env = append(env, fmt.Sprintf("NORSK_PORT_%d_%s=%s", p.ContainerPort, strings.ToUpper(p.Network()), port))
	}
	if len(cpus) > 0 {
		env = append(env, "NORSK_CPU_LIST="+noderesources.FormatCPUList(cpus))
	}
	return env
}

// planCPUs checks job's norsk_cpu_list against allowed (the CPUs this
// worker may run on, ascending) and returns it ascending without
// duplicates; nil when the job is not pinned. A CPU outside allowed is an
// ErrInvalidJob naming it: the kernel would silently narrow the mask to
// the allowed ones, and the job would run on fewer cores than it was
// given.
func planCPUs(job *workerpb.WorkerJob, allowed []uint32) ([]uint32, error) {
	if len(job.GetNorskCpuList()) == 0 {
		return nil, nil
	}
	cpus := slices.Compact(slices.Sorted(slices.Values(job.GetNorskCpuList())))
	for _, c := range cpus {
		if _, ok := slices.BinarySearch(allowed, c); !ok {
			return nil, fmt.Errorf("%w: norsk_cpu_list names cpu %d, which this worker may not run on (its affinity mask allows %s)",
				worker.ErrInvalidJob, c, noderesources.FormatCPURanges(allowed))
		}
	}
	return cpus, nil
}
