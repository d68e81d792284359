package gateway

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// toStatus maps an error from the layers below to a gRPC status. It is the
// only place that builds statuses from domain errors (STYLE §5): grain
// replies carry norsk.api.error.Code, whose values are the gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var re *actors.ReplyError
	var fe *persistence.FilterError
	switch {
	case errors.As(err, &re):
		if re.Reason != "" {
			return withReason(codes.Code(re.Code), re.Reason, re.Message)
		}
		return status.Error(codes.Code(re.Code), re.Message)
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, fe.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, actors.ErrGrainTimeout):
		return status.Error(codes.Unavailable, "the manager did not complete the request in time; it is safe to retry: "+err.Error())
	case errors.Is(err, persistence.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, persistence.ErrTooLarge), errors.Is(err, persistence.ErrNoSpace):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, persistence.ErrClosed):
		return status.Error(codes.Unavailable, "the manager is shutting down")
	case errors.Is(err, persistence.ErrRestoring):
		return status.Error(codes.Unavailable, "this manager's store is being restored from the leader's snapshot; retry, or ask another manager: "+err.Error())
	case errors.Is(err, persistence.ErrCorrupt):
		return status.Error(codes.DataLoss, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// replyStatus returns the status of a grain round trip (transport error or
// error reply).
func replyStatus(r *internalpb.Reply, err error) error {
	if err != nil {
		return toStatus(err)
	}
	return toStatus(actors.AsError(r))
}

// withReason builds a status carrying a machine-readable reason as a
// google.rpc.ErrorInfo detail in workerauth.ErrorDomain.
func withReason(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: workerauth.ErrorDomain})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
