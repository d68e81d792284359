package worker

import "errors"

var (
	// ErrRegistrationRejected is returned (wrapped, with the manager's
	// message) by Agent.Run when the manager refuses the registration with a
	// permanent error: the token is unknown or deregistered, the stored
	// credential does not match the slot, or the request is invalid.
	// Retrying cannot help; an operator must act.
	ErrRegistrationRejected = errors.New("worker: registration rejected")

	// ErrNoStoredIdentity is returned (wrapped, naming the file) by
	// Agent.Run for a worker given ManagerURLs but no Token whose state
	// directory holds no node identity: without a token or a credential
	// there is nothing to register with.
	ErrNoStoredIdentity = errors.New("worker: no node identity stored")

	// ErrIdentityWithoutManager is returned (wrapped, naming the file and
	// the stored node id) by Agent.Run for a worker given neither Token nor
	// ManagerURLs (a mock-pool worker) whose state directory holds a node
	// identity. That directory belongs to a cluster-slot worker, which must
	// register with the stored credential: as a mock-pool worker it would
	// re-adopt the node's jobs and report them to whichever manager dials
	// it, outside the node's record.
	ErrIdentityWithoutManager = errors.New("worker: node identity stored but no manager to register with")

	// ErrBadStoredIdentity is returned (wrapped, naming the file and what
	// to do) by Agent.Run when the state directory's node identity cannot
	// be read or parsed.
	ErrBadStoredIdentity = errors.New("worker: stored node identity unusable")

	// ErrJobNotRunning is returned by Runtime.Update when the (job, role)
	// is not running on this worker.
	ErrJobNotRunning = errors.New("worker: job not running")

	// ErrRuntimeClosed is returned by Runtime methods called after the
	// runtime was shut down.
	ErrRuntimeClosed = errors.New("worker: runtime shut down")

	// ErrInvalidJob is returned (wrapped, naming the offending field) by
	// Runtime.Start when the job definition cannot be run as given: missing
	// job id, duplicate or unknown service names, a dependency cycle, a bad
	// write_files path, a service without a command…
	ErrInvalidJob = errors.New("worker: invalid job")

	// ErrTemplateUnavailable is returned (wrapped, naming the template and
	// version asked and the templates and versions this worker has) by
	// Runtime.Start for a job whose product_template this worker's
	// catalogue (--template-dir) does not offer. The agent maps it to
	// FailedPrecondition: the job may run on a node that has the template.
	ErrTemplateUnavailable = errors.New("worker: product template not available")

	// ErrStateDirInUse is returned (inside a *StateDirInUseError naming the
	// directory and the holder's PID) by LockStateDir, Agent.Run and
	// process.New when another worker, in this process or another, holds
	// the state directory's lock.
	ErrStateDirInUse = errors.New("worker: state directory in use")
)
