package client

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CallError is the error of a failed NorskManager call. Method is the RPC
// name ("JobById", "CreateJob", …) and Err the gRPC status error, unchanged.
//
// CallError implements GRPCStatus, so status.Code(err) gives the code of the
// failure and status.Convert(err).Message() the manager's own message (or
// the client's, for a request rejected before it was sent).
type CallError struct {
	// Method is the name of the Manager RPC that failed.
	Method string
	// Err is the gRPC status error of the failure.
	Err error
}

// Error returns "norsk manager: <Method>: <gRPC error>".
func (e *CallError) Error() string {
	return "norsk manager: " + e.Method + ": " + e.Err.Error()
}

// Unwrap returns the gRPC status error.
func (e *CallError) Unwrap() error { return e.Err }

// GRPCStatus returns the status of the failure with the manager's message
// unchanged.
func (e *CallError) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// wrapErr turns the error of a call to method into a *CallError; nil stays
// nil.
func wrapErr(method string, err error) error {
	if err == nil {
		return nil
	}
	return &CallError{Method: method, Err: err}
}

// invalidArg is the *CallError of a request rejected on the client side.
func invalidArg(method, msg string) error {
	return &CallError{Method: method, Err: status.Error(codes.InvalidArgument, msg)}
}
