package membership

import "errors"

var (
	// ErrShutdown is returned by Leave, SetMeta and WaitForMembers once
	// Shutdown has been called, and by Provider.StartMember/StartClient
	// once the provider has been shut down.
	ErrShutdown = errors.New("membership: shut down")

	// ErrLeft is returned by SetMeta after Leave: a manager that left must
	// not advertise itself again (that would undo the leave).
	ErrLeft = errors.New("membership: left the cluster")

	// ErrMetaTooLarge is returned (wrapped, with the sizes) when a Meta
	// encodes to more than memberlist.MetaMaxSize (512) bytes.
	ErrMetaTooLarge = errors.New("membership: encoded meta too large")

	// ErrBroadcastTimeout is returned (wrapped) by SetMeta and Leave when
	// memberlist did not finish broadcasting the change within the timeout.
	// The change is in effect locally and still spreads by gossip and
	// push/pull; callers may treat it as a warning.
	ErrBroadcastTimeout = errors.New("membership: timeout waiting for broadcast")

	// ErrAlreadyStarted is returned by Provider.StartMember/StartClient
	// when the provider was already started: a Provider serves one cluster.
	ErrAlreadyStarted = errors.New("membership: provider already started")
)

// ErrInvalidConfig is wrapped by Config.Validate (and so by New); the
// message names the offending field.
var ErrInvalidConfig = errors.New("membership: invalid config")
