// Package bundle implements the bundle grain (AutoManager v1): one actor
// per bundle that owns the bundle's record (the bundle as accepted, its
// derived jobs with their generations, the jobs being removed), and brings
// the derived jobs in line with it through the job grains.
//
// Rules (docs/design/bundles.md):
//
//   - A bundle expands into one derived job per job spec and replica:
//     replica 0 always, replica 1 iff the bundle has a resilience policy.
//     Derived job ids are "<bundle id>.<replica index>.<job name>"; the
//     tags bundleId, replicaIndex and jobName are stamped on each, plus
//     dormant=true while the job is dormant (start_mode "manual" until
//     StartBundleJob, or after StopBundleJob).
//   - Every accepted change (create, update, start/stop of a derived job,
//     delete) increments the bundle's generation and is committed before
//     any job grain is called; the grain then works asynchronously until
//     every derived job reflects it (synced) and every removed job is
//     completed and deleted, retrying with backoff. The work is resumable:
//     a restarted grain, or the new owner after a failover (woken by the
//     reviver through the ix/bundle/pending index), carries on from the
//     record.
//   - Calls to job grains carry request ids derived from the bundle id, its
//     incarnation, the job's generation and the job, so that a repeated
//     call (a retry, a resumed round) is answered from the job's record
//     instead of being applied twice.
//   - A job is the bundle's because the record lists it, never because of
//     its tags: CreateBundle, and UpdateBundle for every derived job id new
//     to the record, first check that no job has the id (whatever its
//     tags) and write nothing if one does (ALREADY_EXISTS).
//   - DeleteBundle moves the bundle to DELETING; the stop-then-delete saga
//     completes and deletes every derived job, then removes the bundle
//     (leaving a tombstone) with a bundle_deleted event.
//
// The package imports actors, actors/job (for the job hash), persistence
// and the protos; never cluster/.
package bundle
