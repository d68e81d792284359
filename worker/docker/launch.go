package docker

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// Container features of a compose stack (a product template): optional
// fields of serviceSpec and of the job record, empty for a legacy job.
// The template glue fills them from a worker/template Stack; they are
// persisted with the spec, so a restarted worker re-adopts (and restarts)
// exactly the containers it created.

// Labels a template job's containers carry besides the runtime's own.
const (
	// LabelTemplate is the product template's name.
	LabelTemplate = "io.norsk.template"
	// LabelTemplateVersion is the product template's version.
	LabelTemplateVersion = "io.norsk.template-version"
)

// healthcheck is a service's healthcheck, as compose gives it. Durations
// of 0 take Docker's defaults (30 s interval and timeout, 0 start period);
// Retries 0 means Docker's 3.
type healthcheck struct {
	// Test is Docker's form: ["CMD", arg…], ["CMD-SHELL", "cmd"] or
	// ["NONE"]; empty with Disable false: the image's HEALTHCHECK.
	Test        []string      `json:"test,omitempty"`
	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	Retries     int           `json:"retries,omitempty"`
	Disable     bool          `json:"disable,omitempty"` // compose `disable: true`: no healthcheck, not even the image's
}

// config returns Docker's HealthConfig.
func (h *healthcheck) config() *container.HealthConfig {
	if h.Disable {
		return &container.HealthConfig{Test: []string{"NONE"}}
	}
	return &container.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
}

// watched reports whether the container's health status is watched
// (depends_on healthy waits for it).
func (h *healthcheck) watched() bool {
	return h != nil && !h.Disable && !(len(h.Test) == 1 && h.Test[0] == "NONE")
}

// bindMount mounts the host path Source at Target: a bind volume of a
// stack, or a compose config (a file of the template, read-only).
type bindMount struct {
	Source   string `json:"source"` // absolute host path
	Target   string `json:"target"` // absolute path in the container
	ReadOnly bool   `json:"read_only,omitempty"`
}

// networkAttach attaches a service to the stack network Name (one of the
// stack's Networks) with Aliases besides its service name.
type networkAttach struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
}

// stackSpec is what a stack declares besides its services: its named
// volumes and its networks, created with the project and removed (the
// networks) when it ends, as the single project network is for a legacy
// job. Persisted in the record.
type stackSpec struct {
	Volumes  []string    `json:"volumes,omitempty"`  // named volumes (volumeName of each)
	Networks []string    `json:"networks,omitempty"` // networks (stackNetworkName of each)
	Files    []stackFile `json:"files,omitempty"`    // mounted read-only (serviceSpec.StackFiles); template.go
}

// stackNetworkName is the Docker network for the stack network net of
// project.
func stackNetworkName(project, net string) string {
	return project + "_" + sanitise(net) + "-" + shortHash(net)
}

// validateStack checks the stack features of specs: networks and named
// volumes are the stack's (or the job's volumes), depends_on conditions are known and name a dependency, a
// healthy condition names a service with a healthcheck, bind sources and
// targets are absolute paths. The error names the service and the field.
func validateStack(st *stackSpec, jobVolumes []string, specs []*serviceSpec) error {
	nets, vols := map[string]bool{}, map[string]bool{}
	for _, v := range jobVolumes {
		vols[v] = true
	}
	if st != nil {
		for _, n := range st.Networks {
			if n == "" || nets[n] {
				return fmt.Errorf("stack network %q is empty or given twice", n)
			}
			nets[n] = true
		}
		for _, v := range st.Volumes {
			if v == "" || vols[v] {
				return fmt.Errorf("stack volume %q is empty or given twice (or also a job volume)", v)
			}
			vols[v] = true
		}
	}
	byName := map[string]*serviceSpec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	for _, s := range specs {
		for _, n := range s.Networks {
			if !nets[n.Name] {
				return fmt.Errorf("service %q: network %q is not a network of the stack", s.Name, n.Name)
			}
		}
		for dep, c := range s.Conditions {
			cond, err := supervisor.ParseCondition(c)
			if err != nil {
				return fmt.Errorf("service %q depends_on %q: %w", s.Name, dep, err)
			}
			if !slices.Contains(s.DependsOn, dep) {
				return fmt.Errorf("service %q: depends_on condition for %q, which it does not depend on", s.Name, dep)
			}
			if d := byName[dep]; cond == supervisor.ConditionHealthy && d != nil && !d.Healthcheck.watched() {
				return fmt.Errorf("service %q depends_on %q being healthy, but %q has no healthcheck", s.Name, dep, dep)
			}
		}
		for i, v := range s.Volumes {
			if !vols[v.Volume] {
				return fmt.Errorf("service %q volumes[%d]: volume %q is not a volume of the stack", s.Name, i, v.Volume)
			}
		}
		for i, f := range s.StackFiles {
			if st == nil || f.Index < 0 || f.Index >= len(st.Files) || !path.IsAbs(f.Path) || path.Clean(f.Path) == "/" {
				return fmt.Errorf("service %q stack_files[%d]: file %d at %q is not a file of the stack at an absolute path", s.Name, i, f.Index, f.Path)
			}
		}
		for i, b := range s.Binds {
			if !filepath.IsAbs(b.Source) || !path.IsAbs(b.Target) || path.Clean(b.Target) == "/" {
				return fmt.Errorf("service %q binds[%d]: source %q and target %q must be absolute paths (target not /)", s.Name, i, b.Source, b.Target)
			}
		}
	}
	return nil
}
