package docker

import (
	"fmt"
	"net"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/shlex"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// serviceSpec is how one container is created: derived from the job
// definition at Start and persisted in the job record, so that restarts
// and a restarted worker use exactly what was started.
type serviceSpec struct {
	Name          string                          `json:"name"`
	Image         string                          `json:"image"`
	Cmd           []string                        `json:"cmd,omitempty"` // nil: the image's default
	Env           []string                        `json:"env"`
	Restart       commonpb.Service_ServiceRestart `json:"restart"`
	RestartCount  uint32                          `json:"restart_count"`  // effective (defaults applied)
	RestartPeriod time.Duration                   `json:"restart_period"` // effective (defaults applied)
	DependsOn     []string                        `json:"depends_on,omitempty"`
	Ports         []hostports.Mapping             `json:"ports,omitempty"`
	Volumes       []volumeMount                   `json:"volumes,omitempty"`
	Files         []fileMount                     `json:"files,omitempty"`
	ShmSize       int64                           `json:"shm_size,omitempty"` // bytes; 0: Docker's default
	CPUSet        string                          `json:"cpu_set,omitempty"`  // "0,2"; "": any CPU
	Media         bool                            `json:"media,omitempty"`    // the Norsk Media container

	// Optional container features a compose stack (product template)
	// needs; legacy jobs leave them empty. See launch.go.

	// Conditions gives a depends_on condition per dependency
	// ("started", "healthy", "completed_successfully",
	// supervisor.ParseCondition); a dependency not in it is "started".
	Conditions  map[string]string `json:"depends_on_conditions,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"` // nil: the image's ENTRYPOINT
	Healthcheck *healthcheck      `json:"healthcheck,omitempty"`
	Binds       []bindMount       `json:"binds,omitempty"`    // host paths (bind volumes and compose configs)
	Networks    []networkAttach   `json:"networks,omitempty"` // stack networks; empty: the project network
	Labels      map[string]string `json:"labels,omitempty"`   // extra labels (io.norsk.template…)
	// StackFiles mounts files of the stack (stackSpec.Files[Index]: the
	// launch config, compose configs) read-only at absolute paths.
	StackFiles []fileMount `json:"stack_files,omitempty"`

	mappings []*commonpb.PortMapping // requested mappings; only during Start
	envVars  []string                // the service's environment_variables; only during Start
}

// volumeMount mounts the job volume Volume (a name in the job's
// `volumes`) at Target.
type volumeMount struct {
	Volume   string `json:"volume"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// fileMount mounts write_files[Index] at Path: absolute, or relative to
// the image's working directory (resolved when the container is created).
type fileMount struct {
	Index int    `json:"index"`
	Path  string `json:"path"`
}

// planJob validates job for this runtime and returns its services in
// start order, the Norsk Media container first among equals when the
// worker has media images. Errors wrap worker.ErrInvalidJob and name the
// offending field.
func planJob(job *workerpb.WorkerJob, media map[string]string) ([]*serviceSpec, error) {
	if job.GetJobId().GetJobId() == "" {
		return nil, fmt.Errorf("%w: job_id is empty", worker.ErrInvalidJob)
	}
	vols := make(map[string]bool, len(job.GetVolumes()))
	for i, v := range job.GetVolumes() {
		if v == "" || vols[v] {
			return nil, fmt.Errorf("%w: volumes[%d] %q is empty or given twice", worker.ErrInvalidJob, i, v)
		}
		vols[v] = true
	}
	var specs []*serviceSpec
	if len(media) > 0 {
		spec, err := planMedia(job, media, vols)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	index := make(map[string]int, len(job.GetServices())+1)
	for i, s := range specs {
		index[s.Name] = i
	}
	for i, svc := range job.GetServices() {
		spec, err := planService(i, svc, vols)
		if err != nil {
			return nil, err
		}
		if _, dup := index[spec.Name]; dup {
			if spec.Name == MediaServiceName && len(media) > 0 {
				return nil, fmt.Errorf("%w: services[%d].name %q is reserved for the Norsk Media container on this worker", worker.ErrInvalidJob, i, spec.Name)
			}
			return nil, fmt.Errorf("%w: services[%d].name %q is used twice", worker.ErrInvalidJob, i, spec.Name)
		}
		index[spec.Name] = len(specs)
		specs = append(specs, spec)
	}
	for _, spec := range specs {
		for _, dep := range spec.DependsOn {
			if _, ok := index[dep]; !ok {
				return nil, fmt.Errorf("%w: service %q depends on unknown service %q", worker.ErrInvalidJob, spec.Name, dep)
			}
			if dep == spec.Name {
				return nil, fmt.Errorf("%w: service %q depends on itself", worker.ErrInvalidJob, spec.Name)
			}
		}
	}
	if err := planFiles(job.GetWriteFiles(), specs, index); err != nil {
		return nil, err
	}
	return svcplan.StartOrder(specs, func(s *serviceSpec) string { return s.Name }, func(s *serviceSpec) []string { return s.DependsOn })
}

// planMedia returns the Norsk Media container of job: the image for its
// norsk_media_version, its norsk_service_parameters, and the CPUs of
// norsk_cpu_list (else the parameters' cpu_set).
func planMedia(job *workerpb.WorkerJob, media map[string]string, vols map[string]bool) (*serviceSpec, error) {
	version := job.GetNorskMediaVersion()
	if version == "" {
		version = "RECOMMENDED"
	}
	image, ok := media[strings.ToUpper(version)]
	if !ok {
		return nil, fmt.Errorf("%w: norsk_media_version %q has no Norsk Media image on this worker (configured: %s; see --media-image)",
			worker.ErrInvalidJob, version, strings.Join(sortedKeys(media), ", "))
	}
	params := job.GetNorskServiceParameters()
	spec := &serviceSpec{
		Name:    MediaServiceName,
		Image:   image,
		Restart: commonpb.Service_ON_FAILURE,
		Media:   true,
	}
	spec.RestartCount, spec.RestartPeriod = svcplan.DefaultRestartCount, svcplan.DefaultRestartPeriod
	if err := planParams(spec, "norsk_service_parameters", params, vols); err != nil {
		return nil, err
	}
	if cpus := job.GetNorskCpuList(); len(cpus) > 0 {
		set, err := cpuSet("norsk_cpu_list", cpus)
		if err != nil {
			return nil, err
		}
		spec.CPUSet = set
	}
	return spec, nil
}

func planService(i int, svc *commonpb.Service, vols map[string]bool) (*serviceSpec, error) {
	name := svc.GetName()
	field := fmt.Sprintf("services[%d]", i)
	if name == "" {
		return nil, fmt.Errorf("%w: %s.name is empty", worker.ErrInvalidJob, field)
	}
	image := svc.GetDocker().GetContainerUrl().GetUrl()
	if image == "" {
		return nil, fmt.Errorf("%w: service %q has no docker.container_url: the docker runtime runs every service from an image (a service with only a command needs the process runtime)",
			worker.ErrInvalidJob, name)
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return nil, fmt.Errorf("%w: service %q docker.container_url %q is not an image reference: %v", worker.ErrInvalidJob, name, image, err)
	}
	spec := &serviceSpec{
		Name:      name,
		Image:     image,
		Restart:   svc.GetRestart(),
		DependsOn: slices.Clone(svc.GetDependsOn()),
	}
	spec.RestartCount, spec.RestartPeriod = svcplan.EffectiveRestart(svc)
	if cmd := strings.TrimSpace(svc.GetCommand()); cmd != "" {
		args, err := shlex.Split(cmd)
		if err != nil {
			return nil, fmt.Errorf("%w: service %q command %q cannot be split into arguments: %v", worker.ErrInvalidJob, name, cmd, err)
		}
		spec.Cmd = args
	}
	if err := planParams(spec, fmt.Sprintf("service %q parameters", name), svc.GetParameters(), vols); err != nil {
		return nil, err
	}
	return spec, nil
}

// maxEnvEntry is Linux's MAX_ARG_STRLEN: one NAME=value string passed to
// exec must be shorter (32 pages of 4 KiB).
const maxEnvEntry = 128 << 10

// planParams applies ServiceParameters to spec; field names the
// parameters in errors.
func planParams(spec *serviceSpec, field string, p *commonpb.ServiceParameters, vols map[string]bool) error {
	for j, ev := range p.GetEnvironmentVariables() {
		if ev.GetName() == "" || strings.ContainsAny(ev.GetName(), "=\x00") || strings.ContainsRune(ev.GetValue(), 0) {
			return fmt.Errorf("%w: %s.environment_variables[%d] (%q) is not a valid variable", worker.ErrInvalidJob, field, j, ev.GetName())
		}
		if n := len(ev.GetName()) + 1 + len(ev.GetValue()); n >= maxEnvEntry {
			return fmt.Errorf("%w: %s.environment_variables[%d] (%q) is %d bytes; Linux passes at most %d bytes per variable to a program",
				worker.ErrInvalidJob, field, j, ev.GetName(), n, maxEnvEntry-1)
		}
		spec.envVars = append(spec.envVars, ev.GetName()+"="+ev.GetValue())
	}
	for j, pm := range p.GetPortMappings() {
		if err := hostports.Validate(pm); err != nil {
			return fmt.Errorf("%w: %s.port_mappings[%d]: %v", worker.ErrInvalidJob, field, j, err)
		}
	}
	spec.mappings = p.GetPortMappings()
	targets := map[string]bool{}
	for j, vm := range p.GetVolumeMounts() {
		f := fmt.Sprintf("%s.volume_mounts[%d]", field, j)
		switch target := vm.GetContainerPath(); {
		case !vols[vm.GetVolumeName()]:
			return fmt.Errorf("%w: %s.volume_name %q is not one of the job's volumes", worker.ErrInvalidJob, f, vm.GetVolumeName())
		case !path.IsAbs(target) || path.Clean(target) == "/" || strings.ContainsAny(target, ":\x00"):
			return fmt.Errorf("%w: %s.container_path %q must be an absolute path other than / (without ':')", worker.ErrInvalidJob, f, target)
		case targets[path.Clean(target)]:
			return fmt.Errorf("%w: %s.container_path %q is mounted twice", worker.ErrInvalidJob, f, target)
		}
		targets[path.Clean(vm.GetContainerPath())] = true
		spec.Volumes = append(spec.Volumes, volumeMount{Volume: vm.GetVolumeName(), Target: path.Clean(vm.GetContainerPath()), ReadOnly: vm.GetReadOnly()})
	}
	if shm := p.GetSharedMemorySize(); shm != nil {
		if shm.GetValue() > 1<<40 {
			return fmt.Errorf("%w: %s.shared_memory_size %d bytes is more than 1 TiB", worker.ErrInvalidJob, field, shm.GetValue())
		}
		spec.ShmSize = int64(shm.GetValue())
	}
	if len(p.GetCpuSet()) > 0 {
		set, err := cpuSet(field+".cpu_set", p.GetCpuSet())
		if err != nil {
			return err
		}
		spec.CPUSet = set
	}
	return nil
}

// cpuSet validates CPU numbers against this host and returns them in
// Docker's cpuset form ("0,2,3"), sorted and without duplicates.
func cpuSet(field string, cpus []uint32) (string, error) {
	n := runtime.NumCPU()
	set := slices.Clone(cpus)
	slices.Sort(set)
	set = slices.Compact(set)
	parts := make([]string, len(set))
	for i, c := range set {
		if int(c) >= n {
			return "", fmt.Errorf("%w: %s names CPU %d, but this host has CPUs 0-%d", worker.ErrInvalidJob, field, c, n-1)
		}
		parts[i] = strconv.FormatUint(uint64(c), 10)
	}
	return strings.Join(parts, ","), nil
}

// planFiles checks write_files (absolute paths inside the container, or
// relative to the image's working directory; known services) and records
// on each service the files it sees: those naming it, or every file that
// names no service.
func planFiles(files []*commonpb.WriteFile, specs []*serviceSpec, index map[string]int) error {
	for i, wf := range files {
		p := wf.GetPath()
		clean := path.Clean(p)
		if p == "" || strings.ContainsAny(p, ":\x00") || clean == "/" || clean == "." || strings.HasPrefix(clean, "../") || clean == ".." {
			return fmt.Errorf("%w: write_files[%d].path %q must be a file path: absolute inside the container, or relative to the image's working directory (no .., no ':')",
				worker.ErrInvalidJob, i, p)
		}
		if m := wf.GetMode(); m != nil && m.GetValue() > 0o7777 {
			return fmt.Errorf("%w: write_files[%d].mode %o is not a file mode", worker.ErrInvalidJob, i, m.GetValue())
		}
		for _, s := range wf.GetServices() {
			if _, ok := index[s]; !ok {
				return fmt.Errorf("%w: write_files[%d] names unknown service %q", worker.ErrInvalidJob, i, s)
			}
		}
		for _, spec := range specs {
			if len(wf.GetServices()) == 0 || slices.Contains(wf.GetServices(), spec.Name) {
				spec.Files = append(spec.Files, fileMount{Index: i, Path: clean})
			}
		}
	}
	return nil
}

// serviceEnv returns the environment of a service's container: NORSK_JOB_*
// and NORSK_SERVICE_NAME, then the service's environment_variables, then
// per port mapping NORSK_PORT_<container_port> (and _TCP/_UDP) and
// NORSK_ADDR_<container_port>, the port and host:port the service must
// bind, which win over anything above. With host networking they are the
// resolved host port and address; with a job network they are the
// container port on 0.0.0.0 (Docker publishes it on the host port), and
// NORSK_PUBLISHED_<container_port> gives the host address:port.
func serviceEnv(key worker.JobKey, spec *serviceSpec, hostNetwork bool) []string {
	env := []string{
		"NORSK_JOB_ID=" + string(key.JobID),
		"NORSK_JOB_ROLE=" + key.Role,
		"NORSK_SERVICE_NAME=" + spec.Name,
	}
	env = append(env, spec.envVars...)
	seen := map[uint32]bool{}
	for _, p := range spec.Ports {
		bindHost, bindPort := p.Host, p.Published
		if !hostNetwork {
			bindHost, bindPort = "0.0.0.0", p.ContainerPort
		}
		port := strconv.FormatUint(uint64(bindPort), 10)
		if !seen[p.ContainerPort] {
			seen[p.ContainerPort] = true
			env = append(env, fmt.Sprintf("NORSK_PORT_%d=%s", p.ContainerPort, port),
				fmt.Sprintf("NORSK_ADDR_%d=%s", p.ContainerPort, net.JoinHostPort(bindHost, port)))
			if !hostNetwork {
				env = append(env, fmt.Sprintf("NORSK_PUBLISHED_%d=%s", p.ContainerPort,
					net.JoinHostPort(p.Host, strconv.FormatUint(uint64(p.Published), 10))))
			}
		}
		env = append(env, fmt.Sprintf("NORSK_PORT_%d_%s=%s", p.ContainerPort, strings.ToUpper(p.Network()), port))
	}
	return svcplan.MergeEnv(nil, env)
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
