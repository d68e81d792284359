package docker

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/go-connections/nat"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
)

// containerStartOptions starts a created container.
var containerStartOptions = container.StartOptions{}

// create writes the job's files, removes leftovers of an earlier run of the
// project, and creates the network, the volumes and the containers.
func (j *job) create(ctx context.Context, def *workerpb.WorkerJob, images map[string]image.InspectResponse) error {
	if err := j.writeFiles(def); err != nil {
		return err
	}
	if err := j.writeStackFiles(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if err := j.removeContainers(ctx); err != nil {
		return fmt.Errorf("remove containers of an earlier run: %w", err)
	}
	if j.network != "" {
		j.r.removeNetwork(ctx, j.network)
		_, err := j.r.cli.NetworkCreate(ctx, j.network, network.CreateOptions{Driver: "bridge", Labels: j.labels("")})
		if err != nil {
			return fmt.Errorf("create network %s: %w", j.network, err)
		}
	}
	if err := j.createStackNetworks(ctx); err != nil {
		return err
	}
	for _, v := range j.volumes(def) {
		labels := j.labels("")
		labels[LabelVolume] = v
		name := volumeName(j.r.id, j.key, v)
		if _, err := j.r.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
			return fmt.Errorf("create volume %s for job volume %q: %w", name, v, err)
		}
	}
	for _, s := range j.svcs {
		id, err := j.createContainer(ctx, s, images[s.spec.Image])
		if err != nil {
			return fmt.Errorf("create container of service %q: %w", s.spec.Name, err)
		}
		s.id = id
	}
	return nil
}

// writeFiles writes write_files[i] to dir/files/<i>, the source of its
// bind mounts.
func (j *job) writeFiles(def *workerpb.WorkerJob) error {
	files := filepath.Join(j.dir, "files")
	if err := os.RemoveAll(files); err != nil {
		return fmt.Errorf("remove stale files: %w", err)
	}
	if err := os.MkdirAll(files, 0o755); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	for i, wf := range def.GetWriteFiles() {
		mode := os.FileMode(0o644)
		if wf.GetMode() != nil {
			mode = os.FileMode(wf.GetMode().GetValue()) & os.ModePerm
		}
		p := j.filePath(i)
		if err := os.WriteFile(p, wf.GetContents(), mode); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
	}
	return nil
}

func (j *job) filePath(i int) string {
	return filepath.Join(j.dir, "files", fmt.Sprintf("%d", i))
}

// writeStackFiles writes the stack's files (launch config, configs) to
// dir/stack/<i>, the sources of their read-only bind mounts.
func (j *job) writeStackFiles() error {
	if j.stack == nil || len(j.stack.Files) == 0 {
		return nil
	}
	dir := filepath.Join(j.dir, "stack")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove stale stack files: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	for i, f := range j.stack.Files {
		if err := os.WriteFile(j.stackFilePath(i), f.Data, 0o644); err != nil {
			return fmt.Errorf("write stack file %d (%s): %w", i, f.describe(), err)
		}
	}
	return nil
}

func (j *job) stackFilePath(i int) string {
	return filepath.Join(j.dir, "stack", fmt.Sprintf("%d", i))
}

// labels returns the labels of the project's objects; svc is "" for the
// network and volumes.
func (j *job) labels(svc string) map[string]string {
	l := map[string]string{
		LabelWorker:  j.r.id,
		LabelProject: j.project,
		LabelJob:     string(j.key.JobID),
		LabelRole:    j.key.Role,
	}
	if svc != "" {
		l[LabelService] = svc
	}
	return l
}

// createContainer creates s's container (Docker's restart policy "no":
// the supervisor restarts it) from its spec.
func (j *job) createContainer(ctx context.Context, s *service, img image.InspectResponse) (string, error) {
	spec := s.spec
	cfg := &container.Config{
		Image:  spec.Image,
		Env:    spec.Env,
		Labels: j.labels(spec.Name),
	}
	if spec.Cmd != nil {
		cfg.Cmd = spec.Cmd
	}
	if spec.Entrypoint != nil {
		cfg.Entrypoint = spec.Entrypoint
	}
	if spec.Healthcheck != nil {
		cfg.Healthcheck = spec.Healthcheck.config()
	}
	for k, v := range spec.Labels {
		if _, own := cfg.Labels[k]; !own {
			cfg.Labels[k] = v
		}
	}
	hc := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		ShmSize:       spec.ShmSize,
		Resources:     container.Resources{CpusetCpus: spec.CPUSet},
	}
	var nc *network.NetworkingConfig
	switch {
	case len(spec.Networks) > 0:
		// Engines before API 1.44 take one network at create: the first;
		// the others are connected before the container starts (as
		// docker compose does).
		first := spec.Networks[0]
		name := stackNetworkName(j.project, first.Name)
		hc.NetworkMode = container.NetworkMode(name)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			name: {Aliases: append([]string{spec.Name}, first.Aliases...)},
		}}
	case j.network == "":
		hc.NetworkMode = network.NetworkHost
	default:
		hc.NetworkMode = container.NetworkMode(j.network)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			j.network: {Aliases: []string{spec.Name}},
		}}
	}
	if hc.NetworkMode != network.NetworkHost {
		cfg.ExposedPorts = nat.PortSet{}
		hc.PortBindings = nat.PortMap{}
		for _, p := range spec.Ports {
			for _, n := range hostports.Networks(p.Protocol) {
				port := nat.Port(fmt.Sprintf("%d/%s", p.ContainerPort, n))
				cfg.ExposedPorts[port] = struct{}{}
				hc.PortBindings[port] = append(hc.PortBindings[port], nat.PortBinding{HostIP: p.Host, HostPort: fmt.Sprintf("%d", p.Published)})
			}
		}
	}
	for _, v := range spec.Volumes {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: volumeName(j.r.id, j.key, v.Volume), Target: v.Target, ReadOnly: v.ReadOnly})
	}
	// Checked again here: a restored job's record may come from a worker
	// that did not check, or had other protected paths.
	if err := checkBinds([]*serviceSpec{spec}, j.r.cfg.ProtectedPaths); err != nil {
		return "", err
	}
	for _, b := range spec.Binds {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	workDir := "/"
	if img.Config != nil && img.Config.WorkingDir != "" {
		workDir = img.Config.WorkingDir
	}
	seen := map[string]bool{}
	for _, v := range hc.Mounts {
		seen[v.Target] = true
	}
	for _, f := range spec.Files {
		target := f.Path
		if !path.IsAbs(target) {
			target = path.Join(workDir, target)
		}
		if seen[target] {
			return "", fmt.Errorf("write_files[%d] %q is mounted at %s, where another file or volume is mounted", f.Index, f.Path, target)
		}
		seen[target] = true
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: j.filePath(f.Index), Target: target, ReadOnly: true})
	}
	for _, f := range spec.StackFiles {
		if seen[f.Path] {
			return "", fmt.Errorf("%s is mounted at %s, where another file or volume is mounted", j.stack.Files[f.Index].describe(), f.Path)
		}
		seen[f.Path] = true
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: j.stackFilePath(f.Index), Target: f.Path, ReadOnly: true})
	}
	resp, err := j.r.cli.ContainerCreate(ctx, cfg, hc, nc, nil, containerName(j.project, spec.Name))
	if err != nil {
		return "", err
	}
	for _, w := range resp.Warnings {
		s.log.Warn("container created with a warning", "warning", w)
	}
	for _, n := range spec.Networks[min(1, len(spec.Networks)):] {
		name := stackNetworkName(j.project, n.Name)
		es := &network.EndpointSettings{Aliases: append([]string{spec.Name}, n.Aliases...)}
		if err := j.r.cli.NetworkConnect(ctx, name, resp.ID, es); err != nil {
			return resp.ID, fmt.Errorf("connect to network %q: %w", n.Name, err)
		}
	}
	return resp.ID, nil
}

// volumes returns the named volumes of the project: the job's, then the
// stack's.
func (j *job) volumes(def *workerpb.WorkerJob) []string {
	vols := append([]string(nil), def.GetVolumes()...)
	if j.stack != nil {
		vols = append(vols, j.stack.Volumes...)
	}
	return vols
}

// createStackNetworks (re)creates the stack's networks.
func (j *job) createStackNetworks(ctx context.Context) error {
	if j.stack == nil {
		return nil
	}
	for _, n := range j.stack.Networks {
		name := stackNetworkName(j.project, n)
		j.r.removeNetwork(ctx, name)
		if _, err := j.r.cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: j.labels("")}); err != nil {
			return fmt.Errorf("create network %s for stack network %q: %w", name, n, err)
		}
	}
	return nil
}
