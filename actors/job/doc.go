// Package job implements the job grain: one actor per job that owns the
// job's record (definition, state, history, instances), validates every
// command against it, appends the next record and its events through the
// journal, and drives its instances on nodes through the node grains.
//
// Job state rule (ARCHITECTURE §1; docs/design/jobs.md):
//
//   - A job is PRE from creation until its start_date_time passes or one
//     of its instances first reports started, whichever comes first. A job
//     created without a start_date_time (or with one in the past) is ACTIVE
//     at once: an unset start counts as the Unix epoch.
//   - ACTIVE never returns to PRE, whatever later updates do to the start.
//   - CompleteJob moves a job to POST (from PRE or ACTIVE) and stops every
//     instance; POST is final. The state a client sends is ignored.
//
// DeleteJob is refused while the job has instances. Once a deletion is
// committed, the grain asks every node that may hold a worker session to
// send delete_job (best effort; docs/design/jobs.md).
package job
