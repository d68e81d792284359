package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Grain kinds.
const (
	KindJob  = "job"
	KindNode = "node"
	KindPool = "pool"
	// KindBundle is the bundle grain (actors/bundle).
	KindBundle = "bundle"
)

// Router delivers a command to the grain (kind, identity), activating it if
// needed, and returns its reply. Implementations: *Host (one manager) and
// the cluster router of the HA manager.
type Router interface {
	// Request sends cmd and waits for the grain's reply, or for ctx to end
	// (then ErrGrainTimeout or ctx.Err()). A nil error means reply is the
	// grain's answer, which itself may carry an error code.
	Request(ctx context.Context, kind, identity string, cmd proto.Message) (*internalpb.Reply, error)
	// RequestFuture sends cmd and returns a future for the reply, for use
	// inside an actor with actor.Context.ReenterAfter. The future's result
	// is a *internalpb.Reply, or a *actor.DeadLetterResponse if the grain
	// stopped before answering.
	RequestFuture(kind, identity string, cmd proto.Message, timeout time.Duration) *actor.Future
	// Send delivers cmd without waiting for a reply.
	Send(kind, identity string, cmd proto.Message)
}

var (
	// ErrGrainTimeout is returned when a grain does not answer in time.
	ErrGrainTimeout = errors.New("actors: grain did not answer in time")
	// ErrUnknownKind is returned for a kind the host has no props for.
	ErrUnknownKind = errors.New("actors: unknown grain kind")
)

// OK returns a successful reply.
func OK() *internalpb.Reply { return &internalpb.Reply{} }

// Fail returns a reply carrying an error code and a message for the caller.
func Fail(code errorpb.Code, format string, args ...any) *internalpb.Reply {
	return &internalpb.Reply{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FailWithReason is Fail with a machine-readable reason for the client (a
// workerauth.Reason*), sent as a google.rpc.ErrorInfo detail.
func FailWithReason(code errorpb.Code, reason, format string, args ...any) *internalpb.Reply {
	return &internalpb.Reply{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ReplyError is a failed grain reply as a Go error; the gateway maps its
// Code to a gRPC status (with its Reason as an ErrorInfo detail).
type ReplyError struct {
	Code    errorpb.Code
	Message string
	Reason  string
}

// Error returns the grain's message.
func (e *ReplyError) Error() string { return e.Message }

// AsError returns nil for a successful reply and a *ReplyError otherwise.
func AsError(r *internalpb.Reply) error {
	if r.GetCode() == errorpb.Code_OK {
		return nil
	}
	return &ReplyError{Code: r.GetCode(), Message: r.GetMessage(), Reason: r.GetReason()}
}

// Expired reports whether a command's deadline (JobCommand.deadline,
// NodeCommand.deadline, BundleCommand.deadline) has passed: its caller no longer waits for the
// reply, so the grain must not carry it out. A nil deadline never expires.
func Expired(deadline *timestamppb.Timestamp) bool {
	return deadline != nil && time.Now().After(deadline.AsTime())
}

// Late is the reply to a command a grain dequeued after its deadline (it
// did nothing).
func Late(kind, identity string) *internalpb.Reply {
	return Fail(errorpb.Code_DEADLINE_EXCEEDED, "%s %s: the request was dequeued after its deadline and not carried out", kind, identity)
}

// FutureReply interprets the result of a RequestFuture: the reply, or an
// error (timeout, grain stopped).
func FutureReply(res any, err error) (*internalpb.Reply, error) {
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, ErrGrainTimeout
		}
		return nil, err
	}
	switch r := res.(type) {
	case *internalpb.Reply:
		return r, nil
	case *actor.DeadLetterResponse:
		return nil, fmt.Errorf("actors: grain %s stopped before answering: %w", r.GetTarget().GetId(), ErrGrainTimeout)
	}
	return nil, fmt.Errorf("actors: unexpected reply %T", res)
}
