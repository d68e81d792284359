// Package process is the process runtime of the worker: it implements
// worker.Runtime by running each service's `command` through /bin/sh as its
// own session and process group on this host, for hosts without Docker and
// for tests.
//
// It owns the per-(job, role) directories under Config.StateDir (the
// service working directory with the job's write_files, the services'
// output logs, their exit-status files and the job record), host port
// resolution for port_mappings, dependsOn ordering, restart policies, and
// re-adoption of running processes after a worker restart (Restore).
//
// It imports worker for the Runtime contract and must not import the
// manager's packages. docs/design/worker-process-runtime.md describes the
// behaviour; its rules are the contract the tests check.
package process
