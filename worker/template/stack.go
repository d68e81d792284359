package template

import "time"

// LaunchConfigPath is where the Docker runtime mounts the fused launch
// config (Stack.LaunchConfig), read-only, in every container of a stack.
const LaunchConfigPath = "/etc/norsk/launch-config.json"

// LaunchConfigEnv is the environment variable holding the fused launch
// config's JSON text in every service; Resolve sets it in each
// Service.Environment (overriding any value the template gives it).
const LaunchConfigEnv = "NORSK_LAUNCH_CONFIG"

// Dependency conditions of Service.DependsOn (the supervisor's spelling;
// compose's service_started, service_healthy and
// service_completed_successfully).
const (
	ConditionStarted               = "started"
	ConditionHealthy               = "healthy"
	ConditionCompletedSuccessfully = "completed_successfully"
)

// Volume types of Volume.Type.
const (
	VolumeNamed = "volume"
	VolumeBind  = "bind"
)

// Stack is a template resolved for one job: what the Docker runtime runs
// instead of WorkerJob.services. Plain values only; the caller owns it.
type Stack struct {
	// Template and Version name the template (for the container labels
	// io.norsk.template and io.norsk.template-version).
	Template, Version string
	// Services in a stable order (by name).
	Services []Service
	// Volumes are the named volumes the stack declares (top-level
	// volumes), sorted. The runtime scopes them to its project.
	Volumes []string
	// Networks are the networks the stack's services use (top-level
	// networks plus compose's implicit "default" when a service names
	// none), sorted. The runtime scopes them to its project.
	Networks []string
	// LaunchConfig is the fused launch config (compact JSON): the
	// template's launchDefaults, merged with the job's
	// template_launch_defaults_json, then launch_config_json (RFC 7396).
	// The runtime writes it to a file mounted read-only at
	// LaunchConfigPath in every service.
	LaunchConfig []byte
}

// Service is one service of a Stack.
type Service struct {
	// Name is the compose service name (unique in the stack).
	Name string
	// Image is the image reference, after interpolation; never empty.
	Image string
	// Entrypoint and Command override the image's; nil keeps the image's,
	// an empty non-nil slice clears it (as compose).
	Entrypoint []string
	Command    []string
	// Environment is K=V, sorted by key: the service's environment and
	// env_file after interpolation, plus LaunchConfigEnv.
	Environment []string
	// Ports in the template's order.
	Ports []Port
	// Volumes (named volumes and binds) in the template's order.
	Volumes []Volume
	// Networks the service joins, sorted by name.
	Networks []NetworkAttachment
	// DependsOn, sorted by service name.
	DependsOn []Dependency
	// Healthcheck is nil when the template sets none (the image's applies).
	Healthcheck *Healthcheck
	// Restart is "no" (also when the template sets none), "always",
	// "unless-stopped", "on-failure" or "on-failure:N".
	Restart string
	// ShmSize of /dev/shm in bytes; 0 = the engine's default.
	ShmSize int64
	// CPUSet is the cpuset (e.g. "0-3,6"); empty = not pinned.
	CPUSet string
	// Configs are files of the template mounted into the service.
	Configs []ConfigMount
}

// Port is one port mapping.
type Port struct {
	// HostIP is the host address to publish on; empty = the runtime's
	// default.
	HostIP string
	// HostPort is the published host port; 0 = none fixed (the engine
	// picks one).
	HostPort uint16
	// ContainerPort is the port inside the container.
	ContainerPort uint16
	// Protocol is "tcp" or "udp".
	Protocol string
}

// Volume is a named volume or a bind mount of a service.
type Volume struct {
	// Type is VolumeNamed or VolumeBind.
	Type string
	// Source is the volume name (one of Stack.Volumes) or the absolute
	// host path of a bind (relative paths are resolved against the
	// template's version directory).
	Source string
	// Target is the absolute path in the container.
	Target string
	// ReadOnly mounts it read-only (":ro", read_only: true).
	ReadOnly bool
}

// NetworkAttachment is a network a service joins.
type NetworkAttachment struct {
	// Name is the network's compose name (one of Stack.Networks).
	Name string
	// Aliases are extra names the service has on it (its service name
	// always resolves).
	Aliases []string
}

// Dependency is one depends_on entry.
type Dependency struct {
	// Service is the service depended on.
	Service string
	// Condition is ConditionStarted, ConditionHealthy or
	// ConditionCompletedSuccessfully.
	Condition string
}

// Healthcheck is a service's healthcheck. Durations of 0 are the engine's
// defaults.
type Healthcheck struct {
	// Test is in Docker's form: ["CMD", arg...], ["CMD-SHELL", command]
	// or ["NONE"].
	Test []string
	// Interval between checks, Timeout of one, StartPeriod before
	// failures count.
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	// Retries; 0 = the engine's default.
	Retries int
	// Disabled turns off the image's healthcheck.
	Disabled bool
}

// ConfigMount is a template file mounted read-only into a service.
type ConfigMount struct {
	// Source is the absolute path of the file on the worker.
	Source string
	// Target is the absolute path in the container (compose's default:
	// /<config name>).
	Target string
}
