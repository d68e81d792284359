// Package docker is the Docker runtime of the worker: it implements
// worker.Runtime by running each (job, role) as a compose-like project of
// containers over the Docker Engine API (the official Go client; no docker
// CLI), selected with `norsk-ctl --mode=worker --runtime=docker`.
//
// A project holds one container per service (image from the service's
// docker.container_url), plus the Norsk Media container when the worker
// has an image for the job's norsk_media_version; a per-project bridge
// network or host networking (Config.Network); the job's named volumes;
// and the job's write_files, written under StateDir and bind-mounted
// read-only. Every container, network and volume carries labels (worker
// runtime id, job id, role, service) from which a restarted worker finds
// and re-adopts what it left running.
//
// The per-job loop — start order and depends_on conditions, restart
// policies (containers run with Docker's restart policy "no"; the loop
// restarts them so that restart_count within restart_period and
// service_restarting are reported), stop, records, restore — is the
// shared worker/internal/supervisor; this package is its driver (job.go:
// Prepare, Launch, Adopt, Teardown, Persist; container.go: a run's
// handle). It owns pulls, the project's objects, host port resolution
// (shared with the process runtime: worker/internal/hostports), graceful
// stop then kill, DOWN, and the container features a compose stack needs
// (launch.go).
//
// It imports worker for the Runtime contract and must not import the
// manager's packages. docs/design/worker-docker-runtime.md describes the
// behaviour; its rules are the contract the tests check.
package docker
