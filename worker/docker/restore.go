package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// Restore implements worker.Runtime: it reads every job record under
// StateDir/jobs, finds the project's containers by their labels,
// re-adopts the running ones without restarting them, applies the restart
// policy to those that exited while no worker watched them, and finishes
// stops and failures a previous worker left half done. Containers carrying
// this runtime's id but no record (a worker killed between creating them
// and writing the record) are removed. A record that cannot be read is
// logged and left for an operator. Calling Restore again is a no-op.
//
// If the engine does not answer, Restore does not fail: the jobs of the
// records are taken back at once (a running one is listed, so the hello
// reports it) and their containers are adopted, as above, once the engine
// answers. Until then commands for those jobs wait for it; new jobs are
// refused (Start).
func (r *Runtime) Restore(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.mu.closed:
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	case r.mu.restored:
		r.mu.Unlock()
		return nil
	}
	r.mu.restored = true
	r.mu.Unlock()
	if err := r.engine.check(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.restoreLater()
	}
	containers, err := r.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+r.id))})
	if err != nil {
		return fmt.Errorf("docker: list this worker's containers: %w", err)
	}
	pending, err := r.takeRecords(ctx)
	if err != nil {
		return err
	}
	r.adopt(ctx, pending, byProject(containers))
	return nil
}

// restoredJob is a project found in StateDir/jobs: a job taken back from
// its record whose containers are not adopted yet (j set), or a project
// whose containers are left alone (j nil: its record cannot be read).
type restoredJob struct {
	j       *job
	project string
}

// takeRecords reads every record under StateDir/jobs and takes its job
// back (restoreDir). It returns the projects whose containers are not
// orphans.
func (r *Runtime) takeRecords(ctx context.Context) ([]restoredJob, error) {
	entries, err := os.ReadDir(r.jobsDir)
	if err != nil {
		return nil, fmt.Errorf("docker: list %s: %w", r.jobsDir, err)
	}
	var out []restoredJob
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.IsDir() {
			continue
		}
		if rj, ok := r.restoreDir(filepath.Join(r.jobsDir, e.Name()), e.Name()); ok {
			out = append(out, rj)
		}
	}
	return out, nil
}

// adopt starts the goroutine of every restored job over its project's
// containers, then removes the containers of this runtime that belong to
// no record (those of a record left for an operator stay).
func (r *Runtime) adopt(ctx context.Context, pending []restoredJob, containers map[string][]container.Summary) {
	for _, p := range pending {
		if p.j != nil {
			p.j.adoptContainers(containers[p.project])
			r.run(p.j)
		}
		delete(containers, p.project)
	}
	for project, cs := range containers {
		for _, c := range cs {
			r.log.Warn("removing a container without a job record", "project", project, "container", strings.Join(c.Names, ","),
				"job_id", c.Labels[LabelJob], "role", c.Labels[LabelRole], "service", c.Labels[LabelService])
			if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !client.IsErrNotFound(err) {
				r.log.Error("removing a container without a job record", "container", c.ID, "error", err)
			}
		}
		r.removeNetwork(ctx, project)
	}
}

func byProject(containers []container.Summary) map[string][]container.Summary {
	out := map[string][]container.Summary{}
	for _, c := range containers {
		out[c.Labels[LabelProject]] = append(out[c.Labels[LabelProject]], c)
	}
	return out
}

// restoreLater takes the records' jobs back now and adopts their
// containers once the engine answers.
func (r *Runtime) restoreLater() error {
	pending, err := r.takeRecords(r.ctx)
	if err != nil {
		return err
	}
	r.log.Warn("the docker engine does not answer: the recorded jobs are taken back, their containers adopted once it answers",
		"jobs", len(pending))
	r.wg.Add(1)
	go r.adoptWhenEngineAnswers(pending)
	return nil
}

// adoptWhenEngineAnswers waits for the engine, lists this runtime's
// containers and adopts them (adopt). It gives up at shutdown: the records
// stay for the next worker.
func (r *Runtime) adoptWhenEngineAnswers(pending []restoredJob) {
	defer r.wg.Done()
	for {
		if err := r.engine.waitOK(r.ctx); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, engineTimeout)
		containers, err := r.cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+r.id))})
		if err == nil {
			r.log.Info("docker engine answers: adopting the recorded jobs' containers", "jobs", len(pending))
			r.adopt(ctx, pending, byProject(containers))
			cancel()
			return
		}
		cancel()
		r.log.Warn("listing this worker's containers; retrying", "error", err)
		timer := time.NewTimer(r.cfg.EngineCheckInterval)
		select {
		case <-timer.C:
		case <-r.ctx.Done():
			timer.Stop()
			return
		}
	}
}

// restoreDir takes back the job recorded in dir (project's directory): it
// holds its ports and registers it, listed at once if it was running. A
// record that cannot be read is left, with its containers, for an operator
// (rj.j nil). ok is false when the directory holds no record (it is
// removed; its containers are orphans).
func (r *Runtime) restoreDir(dir, project string) (rj restoredJob, ok bool) {
	rec, err := readRecord(filepath.Join(dir, "job.json"))
	if errors.Is(err, os.ErrNotExist) {
		r.log.Info("removing a job directory without a record", "dir", dir)
		_ = os.RemoveAll(dir)
		return restoredJob{}, false
	}
	if err == nil && rec.Project != project {
		err = fmt.Errorf("record of project %s in the directory of project %s", rec.Project, project)
	}
	var def *workerpb.WorkerJob
	if err == nil {
		def, err = rec.job()
	}
	if err != nil {
		r.log.Error("cannot restore job; leaving its directory and containers for an operator", "dir", dir, "error", err)
		return restoredJob{project: project}, true
	}
	key := rec.key()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.jobs[key] != nil {
		return restoredJob{project: project}, true
	}
	specs := make([]*serviceSpec, len(rec.Services))
	for i, s := range rec.Services {
		specs[i] = s.Spec
		r.ports.Hold(key, s.Spec.Ports)
	}
	j := r.newJob(key, specs, rec.Network, rec.Stack)
	srec := supervisor.Record{Phase: rec.Phase, StopGrace: rec.StopGrace, FailReason: rec.FailReason, Def: def}
	for _, s := range rec.Services {
		srec.Services = append(srec.Services, supervisor.ServiceRecord{Restarts: s.Restarts, Completed: s.Completed})
	}
	j.sup = supervisor.Restored(j.supervise(def), srec) // listed (in the hello) from now on if running
	r.mu.jobs[key] = j
	return restoredJob{j: j, project: project}, true
}

// adoptContainers gives j's services the ids of the project's containers
// found by their labels; the supervisor adopts them (Adopt).
func (j *job) adoptContainers(containers []container.Summary) {
	byService := map[string]container.Summary{}
	for _, c := range containers {
		byService[c.Labels[LabelService]] = c
	}
	for _, s := range j.svcs {
		if c, ok := byService[s.spec.Name]; ok {
			s.id = c.ID
		}
	}
}
