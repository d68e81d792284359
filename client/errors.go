package client

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// CallError is the error of a failed NorskManager call. Method is the RPC
// name ("JobById", "CreateJob", …) and Err the gRPC status error, unchanged.
//
// CallError implements GRPCStatus, so status.Code(err) gives the code of the
// failure and status.Convert(err).Message() the manager's own message (or
// the client's, for a request rejected before it was sent, and gRPC's, for
// a call that never reached a manager: see Local).
type CallError struct {
	// Method is the name of the Manager RPC that failed.
	Method string
	// Err is the gRPC status error of the failure.
	Err error
	// Local is true when the status did not come from a manager: the call
	// could not reach one (connection refused, no manager serving), the
	// connection broke, the caller's context ended, or the client
	// rejected the request. Its message is then the client's or gRPC's,
	// not a manager's.
	Local bool
	// Addr is the address of the manager that answered, when known.
	Addr string
	// Tried lists, for a call that could not reach a manager that
	// serves it, every manager address with the outcome of its last
	// connection attempt and what it answered to a health check made
	// after the call failed.
	Tried []AddrStatus
}

// AddrStatus is what the client knows of one manager address after a call
// no manager could take: its last connection outcome and its health.
type AddrStatus struct {
	// Addr is the manager address (host:port).
	Addr string
	// Err is the last connection error ("" when the last attempt
	// connected, or none was made yet: see Connected).
	Err string
	// Connected is true when the last attempt connected.
	Connected bool
	// Health is the grpc.health.v1 status the manager reported when asked
	// after the call failed ("NOT_SERVING": up without a Raft leader;
	// "SERVING": it serves again), "" if it was not asked (unreachable) or
	// did not answer (HealthErr).
	Health string
	// HealthErr is why a manager that was asked did not report a health
	// status.
	HealthErr string
}

// String renders the address and its cause: "addr NOT_SERVING (no Raft
// leader)", "addr SERVING again … (retry)", "addr unreachable: error", "addr connected,
// health check failed: error", "addr connected" or "addr not tried yet".
func (a AddrStatus) String() string {
	switch {
	case a.Health == "NOT_SERVING":
		return a.Addr + " NOT_SERVING (no Raft leader)"
	case a.Health == "SERVING":
		return a.Addr + " SERVING again when asked after the call (retry)"
	case a.Health != "":
		return a.Addr + " " + a.Health
	case a.Err != "":
		return a.Addr + " unreachable: " + a.Err
	case a.HealthErr != "":
		return a.Addr + " connected, health check failed: " + a.HealthErr
	case a.Connected:
		return a.Addr + " connected"
	}
	return a.Addr + " not tried yet"
}

// explained reports whether the status alone says why the manager did
// not take the call (a health status or a connection error).
func (a AddrStatus) explained() bool { return a.Health != "" || a.Err != "" }

// Error returns "norsk manager: <Method>: <gRPC error>". For a call that no
// manager could take it names each manager's cause instead ("norsk
// manager: CreateJob: no manager serves: a:6790 NOT_SERVING (no Raft
// leader), b:6790 unreachable: connect: connection refused"), followed by
// gRPC's error only when some manager's cause is unknown: gRPC's message
// alone is the last attempt's, often another address's dial error.
func (e *CallError) Error() string {
	if s := e.triedSummary(); s != "" {
		if e.allExplained() {
			return "norsk manager: " + e.Method + ": " + s
		}
		return "norsk manager: " + e.Method + ": " + s + ": " + e.Err.Error()
	}
	return "norsk manager: " + e.Method + ": " + e.Err.Error()
}

// allExplained reports whether every manager tried has a known cause.
func (e *CallError) allExplained() bool {
	for _, a := range e.Tried {
		if !a.explained() {
			return false
		}
	}
	return len(e.Tried) > 0
}

// Unwrap returns the gRPC status error.
func (e *CallError) Unwrap() error { return e.Err }

// GRPCStatus returns the status of the failure with the manager's message
// unchanged.
func (e *CallError) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// ConnectionSummary describes, for a call that could not reach a manager
// that serves it, the cause per manager ("no manager serves: a:6790
// NOT_SERVING (no Raft leader), b:6790 unreachable: connect: connection
// refused", then gRPC's innermost message if some cause is unknown); for
// any other error it returns gRPC's own message.
func (e *CallError) ConnectionSummary() string {
	msg := innermost(status.Convert(e.Err).Message())
	if s := e.triedSummary(); s != "" {
		if e.allExplained() {
			return s
		}
		return s + ": " + msg
	}
	return msg
}

func (e *CallError) triedSummary() string {
	if len(e.Tried) == 0 {
		return ""
	}
	parts := make([]string, len(e.Tried))
	for i, a := range e.Tried {
		parts[i] = a.String()
	}
	return "no manager serves: " + strings.Join(parts, ", ")
}

// innermost is the innermost description of a status message: gRPC's
// retry and transport errors nest "rpc error: code = … desc = …".
func innermost(m string) string {
	const desc = "desc = "
	if i := strings.LastIndex(m, desc); i >= 0 {
		return m[i+len(desc):]
	}
	return m
}

// localMarkers are fragments of the status messages gRPC's client stack
// makes itself (a call that never reached a manager, or whose connection
// broke); a manager's own messages never contain them.
var localMarkers = []string{
	"connection error", "error reading from server", "transport is closing", "connection is draining",
	"health check failed", "last connection error", "last resolver error", "produced zero addresses",
	"no children to pick from", "failed to exit idle mode", "client connection is closing",
	"error while dialing", "server preface", "rst_stream", "unexpected eof", "received prior goaway",
	"connection reset by peer", "broken pipe", "context deadline exceeded", "context canceled",
}

// isLocal reports whether err's status message was made by gRPC on the
// client side.
func isLocal(err error) bool {
	m := strings.ToLower(status.Convert(err).Message())
	for _, s := range localMarkers {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// callErr turns the error of a call to method into a *CallError; nil stays
// nil. The status is taken for a manager's unless its message is one of
// gRPC's own or, with the grpc.Peer option p of the call, no manager was
// reached; a local Unavailable lists the managers tried, with the health
// each reachable one reports when asked now (probeHealth: up to
// probeTimeout, bounded by ctx).
func (m *NorskManager) callErr(ctx context.Context, method string, err error, p *peer.Peer) error {
	if err == nil {
		return nil
	}
	ce := &CallError{Method: method, Err: err, Local: isLocal(err)}
	if p != nil {
		if p.Addr == nil {
			ce.Local = true
		} else if !ce.Local {
			ce.Addr = p.Addr.String()
		}
	}
	if ce.Local && status.Code(err) == codes.Unavailable && m.dials != nil {
		ce.Tried = m.probeHealth(ctx, m.dials.statuses(m.addrs))
	}
	return ce
}

// invalidArg is the *CallError of a request rejected on the client side.
func invalidArg(method, msg string) error {
	return &CallError{Method: method, Err: status.Error(codes.InvalidArgument, msg), Local: true}
}
