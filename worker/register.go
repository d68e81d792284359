package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// maxDialBackWaitFactor caps the growing wait between re-registrations
// that bring no session: DialBackTimeout × this factor.
const maxDialBackWaitFactor = 8

// loadStoredIdentity adopts the identity in the state directory if the
// worker restarts without a token, or with the token it was obtained with,
// so that a manager dialing back before re-registration completes is
// served at once. A worker started without a token needs one; a corrupt
// identity stops every worker (the credential in it may be the only one
// for its slot: never overwritten); a mock-pool worker refuses a state
// directory that holds an identity (ErrIdentityWithoutManager): it is a
// slot worker's, and its jobs are that node's.
func (a *Agent) loadStoredIdentity() error {
	id, ok, err := loadIdentity(a.cfg.StateDir)
	if err != nil {
		return err
	}
	switch {
	case !ok && a.cfg.registers() && a.cfg.Token == "":
		return fmt.Errorf("%w in %s: a worker started without --token registers with the credential stored there by an earlier registration; "+
			"start it with --token of a cluster slot (norsk-ctl slot register NAME), or with the --state-dir it registered with",
			ErrNoStoredIdentity, filepath.Join(a.cfg.StateDir, IdentityFile))
	case !ok:
		return nil
	case !a.cfg.registers():
		return fmt.Errorf("%w: %s holds the identity of node %s, so this state directory belongs to a cluster-slot worker, "+
			"which registers with the credential stored there: give the managers to register with (--manager-url or $NORSK_MANAGER_URL); "+
			"a mock-pool worker needs a state directory of its own",
			ErrIdentityWithoutManager, filepath.Join(a.cfg.StateDir, IdentityFile), id.NodeID)
	case a.cfg.Token != "" && id.TokenSHA256 != tokenDigest(a.cfg.Token):
		a.log.Warn("the registration token differs from the one this node registered with: registering as a new node",
			"old_node_id", id.NodeID)
		return nil
	}
	a.setIdentity(id)
	a.log.Info("loaded node identity", "node_id", id.NodeID, "node_name", id.NodeName, "with_token", a.cfg.Token != "")
	return nil
}

func (a *Agent) setIdentity(id Identity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first := a.mu.identity == nil
	a.mu.identity = &id
	if first {
		close(a.identityCh)
	}
}

// waitIdentity returns the identity, waiting up to HelloResponseTimeout for
// a registration in flight (the manager may dial back before the worker has
// stored the response). Nil if there is none by then.
func (a *Agent) waitIdentity(ctx context.Context) *Identity {
	timer := time.NewTimer(a.cfg.HelloResponseTimeout)
	defer timer.Stop()
	select {
	case <-a.identityCh:
	case <-timer.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.identity == nil {
		return nil
	}
	id := *a.mu.identity
	return &id
}

// registerLoop registers, then registers again whenever no manager session
// has been up for a while (DialBackTimeout, growing while re-registering
// brings no session). It returns nil when ctx ends and an error wrapping
// ErrRegistrationRejected when the manager refuses the registration.
func (a *Agent) registerLoop(ctx context.Context) error {
	wait := a.cfg.DialBackTimeout
	for {
		if err := a.register(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		idle, sawSession := a.hub.WaitIdle(ctx, wait)
		if !idle {
			return nil
		}
		if sawSession {
			wait = a.cfg.DialBackTimeout
		}
		a.log.Warn("no manager session for a while; registering again", "waited", wait)
		if !sawSession {
			wait = min(2*wait, maxDialBackWaitFactor*a.cfg.DialBackTimeout)
		}
	}
}

// register calls ClusterMemberRegister on each manager URL in turn, with
// backoff between rounds, until one succeeds, the error is permanent, or
// ctx ends.
func (a *Agent) register(ctx context.Context) error {
	req := a.registrationRequest(ctx)
	backoff := a.cfg.RetryBackoff
	for round := 1; ; round++ {
		var hint time.Duration // the longest retry-after a manager asked for
		for _, u := range a.cfg.ManagerURLs {
			target, _ := ManagerTarget(u) // validated by Config.Validate
			resp, err := a.registerOnce(ctx, target, req)
			if err == nil {
				return a.acceptRegistration(resp, req.GetNodeCredential(), target)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if rej := rejection(target, err); rej != nil {
				a.markRetired(rej, req.GetNodeCredential())
				// Not logged: Run returns it and its caller reports it.
				return rej
			}
			hint = max(hint, retryAfter(err))
			a.log.Warn("registration failed; will retry", "manager", target, "round", round, "error", err)
		}
		// A rate-limited manager says when to come back; never wait longer
		// than the backoff's cap (another manager may answer sooner).
		if err := sleepCtx(ctx, max(jitter(backoff), min(hint, a.cfg.MaxRetryBackoff))); err != nil {
			return err
		}
		backoff = min(2*backoff, a.cfg.MaxRetryBackoff)
	}
}

func (a *Agent) registerOnce(ctx context.Context, target string, req *managerpb.ClusterMemberRegisterRequest) (*managerpb.ClusterMemberRegisterResponse, error) {
	conn, err := grpc.NewClient(target, a.managerDialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RegisterTimeout)
	defer cancel()
	return managerpb.NewManagerClient(conn).ClusterMemberRegister(ctx, req)
}

// registrationRequest builds the request from the config, the bound
// address, this host's hardware and the stored credential.
func (a *Agent) registrationRequest(ctx context.Context) *managerpb.ClusterMemberRegisterRequest {
	host, port := a.advertised()
	req := &managerpb.ClusterMemberRegisterRequest{
		Token:         a.cfg.Token,
		Address:       host,
		Port:          uint32(port),
		Hardware:      hardwareInfo(ctx),
		WorkerVersion: a.cfg.Version,
		Resources:     a.cfg.Resources,
		// Pinned by the manager for the dial-back (self-signed only).
		WorkerCertSha256: a.cfg.CertSHA256,
	}
	if id, ok := a.Identity(); ok {
		req.NodeCredential = id.Credential
	}
	return req
}

// advertised returns the host and port registered for dial-back.
func (a *Agent) advertised() (string, int) {
	host, port, _ := splitHostPort(a.cfg.Listen)
	if addr, ok := a.Addr().(*net.TCPAddr); ok {
		port = addr.Port
	}
	if a.cfg.Advertise != "" {
		h, p, _ := splitAdvertise(a.cfg.Advertise)
		host = h
		if p != 0 {
			port = p
		}
	}
	return host, port
}

func (a *Agent) acceptRegistration(resp *managerpb.ClusterMemberRegisterResponse, presented, target string) error {
	id := Identity{
		NodeID:      NodeID(resp.GetNodeId().GetNodeId()),
		Credential:  resp.GetNodeCredential(),
		NodeName:    resp.GetNodeName(),
		TokenSHA256: tokenDigest(a.cfg.Token),
	}
	old, hadOld := a.Identity()
	if a.cfg.Token == "" {
		// Registered with the credential alone: a later start with the
		// original token must still find its identity.
		id.TokenSHA256 = old.TokenSHA256
	}
	if id.Credential == "" {
		id.Credential = presented
	}
	if id.NodeID == "" || id.Credential == "" {
		return fmt.Errorf("%w: manager %s answered without a node id or node credential", ErrRegistrationRejected, target)
	}
	if hadOld && old.NodeID != id.NodeID {
		a.log.Warn("the manager assigned a different node id", "old_node_id", old.NodeID, "node_id", id.NodeID)
	}
	if err := saveIdentity(a.cfg.StateDir, id); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	a.setIdentity(id)
	a.log.Info("registered with manager", "manager", target, "node_id", id.NodeID, "node_name", id.NodeName)
	return nil
}

// RegistrationError is the error Agent.Run returns when a manager refuses
// the registration permanently; errors.Is(err, ErrRegistrationRejected)
// holds for it.
type RegistrationError struct {
	Manager string     // gRPC target of the manager that refused
	Code    codes.Code // the refusal's gRPC code
	Message string     // the manager's message
	Hint    string     // what an operator should do about it
	// Reason is the manager's machine-readable reason (workerauth.Reason*),
	// "" if it gave none.
	Reason string

	// NodeRetired is true when the refusal ends this worker's own node
	// for good: the registration presented the node's stored credential
	// and the manager answered that its slot was deregistered
	// (workerauth.ReasonTokenRevoked) or that an operator terminated it
	// (workerauth.ReasonNodeTerminated). No manager will manage the node's
	// jobs again, so Agent.Run stopped every job the runtime ran before
	// returning; Stopped and NotStopped say which. Never set for
	// TOKEN_UNKNOWN or CREDENTIAL_UNKNOWN (see retire.go).
	NodeRetired bool
	// NodeID is the retired node ("" unless NodeRetired).
	NodeID NodeID
	// Stopped lists, sorted, the jobs Run stopped because of the refusal.
	Stopped []JobKey
	// NotStopped lists, sorted, the jobs whose stop failed or was cut
	// short (Run's context ended); StopErr joins why. A worker started
	// again on the state directory is refused again and stops them.
	NotStopped []JobKey
	StopErr    error
}

// Error implements error. For a retired node it also says which jobs the
// worker stopped.
func (e *RegistrationError) Error() string {
	return fmt.Sprintf("%v by manager %s: %s (%s). %s%s", ErrRegistrationRejected, e.Manager, e.Message, e.Code, e.Hint, e.retirementSummary())
}

// Unwrap returns ErrRegistrationRejected.
func (e *RegistrationError) Unwrap() error { return ErrRegistrationRejected }

// Hints of the registration refusals, by case.
const (
	hintUnknownToken = "The manager does not know this registration token: check --token against " +
		"\"norsk-ctl slot list\", or register a cluster slot (norsk-ctl slot register NAME) and start the worker with its token."
	hintRevokedToken = "The cluster slot was deregistered, which revoked its token and node credential for good: " +
		"register a new slot (norsk-ctl slot register NAME) and start the worker with the new token."
	hintUnknownCredential = "The manager does not know the node credential in --state-dir (its slot may have been deregistered): " +
		"register a new slot (norsk-ctl slot register NAME) and start the worker with its token."
	hintUnauthenticated = "The manager refused the registration token: check --token, " +
		"or register a cluster slot (norsk-ctl slot register NAME) and start the worker with its token."
	hintBound = "The cluster slot is bound to another worker: restart the original worker with its --state-dir " +
		"(it holds the slot's node credential), or deregister the slot (norsk-ctl slot deregister NODE_ID) " +
		"and register a new one for this worker."
	hintInvalid       = "The manager rejected the registration request as invalid: check --advertise and --listen."
	hintIdentityInUse = "Another worker with this node's identity is connected from the address the manager names: " +
		"this --state-dir is probably a copy of that worker's. Stop one of the two; give a second host a slot of its own " +
		"(norsk-ctl slot register NAME) and a fresh --state-dir."
	hintCertChanged = "The manager pinned the self-signed certificate this node's worker registered with, and this worker presents another: " +
		"its key in --state-dir (" + SelfSignedCertFile + ") was lost or replaced. A new key is a new worker: register a new slot " +
		"(norsk-ctl slot register NAME), or for a cloud node create a new node, and start the worker with the new token and a fresh --state-dir."
	hintTerminated = "An operator terminated this node; the manager refuses its worker for good. To use the host again, " +
		"deregister the slot (norsk-ctl slot deregister NODE_ID), register a new one and start the worker with its token and a fresh --state-dir."
)

// rejection returns a *RegistrationError explained for an operator if err
// is permanent, or nil if it is worth retrying.
func rejection(target string, err error) *RegistrationError {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var hint string
	switch st.Code() {
	case codes.Unauthenticated:
		hint = unauthenticatedHint(errorReason(st))
	case codes.PermissionDenied, codes.AlreadyExists:
		hint = permissionHint(errorReason(st))
	case codes.InvalidArgument:
		hint = hintInvalid
	default:
		return nil
	}
	return &RegistrationError{Manager: target, Code: st.Code(), Message: st.Message(), Hint: hint, Reason: errorReason(st)}
}

// permissionHint picks the hint of a PermissionDenied refusal by reason.
func permissionHint(reason string) string {
	switch reason {
	case workerauth.ReasonIdentityInUse:
		return hintIdentityInUse
	case workerauth.ReasonNodeTerminated:
		return hintTerminated
	case workerauth.ReasonCertChanged:
		return hintCertChanged
	}
	return hintBound
}

// retryAfter returns the delay of the status's google.rpc.RetryInfo detail
// (the manager's registration rate limit sends one), 0 if none.
func retryAfter(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration(), 0)
		}
	}
	return 0
}

// errorReason returns the reason of the status's google.rpc.ErrorInfo
// detail in the manager's domain ("" if none): workerauth.Reason*.
func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == workerauth.ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

// unauthenticatedHint picks the hint of an Unauthenticated refusal from the
// manager's machine-readable reason; an unknown reason (an older manager)
// gets the general hint.
func unauthenticatedHint(reason string) string {
	switch reason {
	case workerauth.ReasonTokenRevoked:
		return hintRevokedToken
	case workerauth.ReasonTokenUnknown:
		return hintUnknownToken
	case workerauth.ReasonCredentialUnknown:
		return hintUnknownCredential
	}
	return hintUnauthenticated
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// managerDialOptions are the options of a registration connection:
// plaintext, or TLS with Config.ManagerTLS (its ServerName, if set, is the
// authority gRPC checks the certificate for).
func (a *Agent) managerDialOptions() []grpc.DialOption {
	tc := a.cfg.ManagerTLS
	if tc == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	if tc.ServerName != "" {
		opts = append(opts, grpc.WithAuthority(tc.ServerName))
	}
	return opts
}
