// Package supervisor is the per-job loop that every worker runtime shares:
// the start phase in dependency order (with depends_on conditions started,
// healthy and completed_successfully), stops with a grace (also during the
// start phase), updates, a Start of a running job, snapshots for List,
// exits, the restart policy with its timers (package svcplan's rules),
// completion, failure, the job's lifecycle and info events, its record and
// its restore after a worker restart.
//
// A runtime supplies how one job's services are run, through Driver (the
// job-level prepare/teardown hooks and Launch) and Handle (one run of one
// service: wait for its exit, stop it with a grace); Adopt re-attaches a
// run a previous worker left. The supervisor never touches processes,
// containers or files itself, and imports neither runtime.
// docs/design/worker-supervisor.md explains the split and why.
//
// It must not import worker/docker, worker/process or anything above
// worker/.
package supervisor
