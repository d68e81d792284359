// Package placement is the placement engine (issue 11; ARCHITECTURE §8):
// a leader-only loop that finds the auto-placed job roles with no instance,
// decides where each goes with the pure chain in scheduler/, and carries
// each decision out through the job grain's ordinary StartJob, the command
// the gateway sends for a manual start. It restarts failed instances after
// the pool's backoff and writes a job's terminal_state (through the job
// grain's UpdateJob) once its restart ceiling is exceeded. It stops
// (through StopJob) the instances of dormant bundle jobs and those of
// auto-placed jobs on a draining node, one bundle replica at a time, so
// that the normal pass places them elsewhere.
//
// Rules (docs/design/placement.md, "The engine"):
//
//   - Everything a pass decides on is read from the replicated store in one
//     Reader view: jobs, nodes, pools, bundles, placed instances and failure
//     history. The only memory the engine keeps is what a new leader can do
//     without: the StartJobs in flight (so a (job, role) is not decided
//     twice while one is) and the last failure text of each (job, role)
//     (for logs, GetPlacement and the placement_failed event).
//   - Every StartJob carries the request id "placement/<job>/<role>/<seq>",
//     seq being the job record's sequence the decision was read at: two
//     leaders in a handover, or a retried pass, that decide on the same
//     record send the same id, and the job grain (the one writer of the
//     job) runs the role at most once.
//
// The package imports actors (the Router), actors/bundle and actors/node
// (tags, derived job ids, the node's zone), actors/job (whether an
// instance runs a stale definition), persistence and the protos;
// never cluster/ or the gateway.
package placement
