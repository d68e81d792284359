// Package process is the process runtime of the worker: it implements
// worker.Runtime by running each service's `command` through /bin/sh as its
// own session and process group on this host, for hosts without Docker and
// for tests.
//
// It owns the per-(job, role) directories under Config.StateDir (the
// service working directory with the job's write_files, the services'
// output logs, their exit-status files and the job record), host port
// resolution for port_mappings, and the process groups; the per-job loop
// (dependsOn ordering, restart policies, stop, records, re-adoption after
// a worker restart) is the shared worker/internal/supervisor, for which
// job.go is the driver and handle.go a run's handle.
//
// It imports worker for the Runtime contract and must not import the
// manager's packages. docs/design/worker-process-runtime.md describes the
// behaviour; its rules are the contract the tests check.
package process
