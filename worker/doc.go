// Package worker is the Norsk worker agent: the program behind
// `norsk-ctl --mode=worker`.
//
// It owns:
//
//   - registration of a cluster-slot worker with the manager
//     (Manager/ClusterMemberRegister) and the node identity (node id,
//     credential, node name) persisted in the worker's state directory;
//   - the gRPC server of norsk.api.worker.Worker/NodeControllerStream that
//     the manager dials back, including the session handshake (proofs,
//     session epochs) described in proto/worker.proto and
//     docs/design/worker-sessions.md;
//   - routing of job commands (provision, stop, update; delete_job to a
//     Runtime that implements JobDataDeleter) to a Runtime and of the
//     Runtime's events (job started/stopped/failed, job info) to the
//     current session, keeping them (bounded) while there is none and
//     sending them, in order, to the next one;
//   - measuring the load reported in hello and health messages, with the
//     conditions of a Runtime that implements ConditionReporter (the Docker
//     runtime's engine).
//
// It does not own how services run: that is a Runtime (worker/process for
// local process groups; a Docker runtime later). Runtimes import this
// package for the Runtime contract and its types; this package never imports
// a runtime. It must not import the manager's packages (actors, cluster,
// persistence): the only contract with the manager is the wire protocol in
// proto/.
//
// A worker stopping never stops jobs: Agent.Run returns when its context is
// cancelled and leaves every job running; the next worker process started
// over the same state directory re-adopts them (Runtime.Restore) and reports
// them in its next hello. Only one worker uses a state directory at a time:
// Agent.Run (and the process runtime) hold an exclusive lock on it
// (LockStateDir), which the operating system releases when the process
// dies.
package worker
