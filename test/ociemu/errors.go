package ociemu

import (
	"fmt"
	"net/http"
)

// APIError is an error answer of the emulator, sent the way OCI sends
// errors: the HTTP status, a JSON body {"code": …, "message": …} and an
// opc-request-id header. The SDK turns it into a common.ServiceError whose
// GetHTTPStatusCode, GetCode and GetMessage return Status, Code and Message.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is OCI's short error code, e.g. "NotAuthorizedOrNotFound".
	Code string
	// Message is the human-readable message.
	Message string
}

// Error implements error.
func (e APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// With returns a copy of e with another message.
func (e APIError) With(message string) APIError {
	e.Message = message
	return e
}

// The errors OCI answers with, by status and code (see the OCI API
// reference, "API Errors"). Their messages are OCI's where OCI has a fixed
// one; use With for another message.
var (
	// ErrInvalidParameter is 400 InvalidParameter: a parameter is invalid
	// or incorrectly formatted.
	ErrInvalidParameter = APIError{http.StatusBadRequest, "InvalidParameter", "A parameter is invalid or incorrectly formatted."}
	// ErrMissingParameter is 400 MissingParameter: a required parameter is
	// missing.
	ErrMissingParameter = APIError{http.StatusBadRequest, "MissingParameter", "A required parameter is missing."}
	// ErrCannotParseRequest is 400 CannotParseRequest: the body is not
	// valid JSON for the operation.
	ErrCannotParseRequest = APIError{http.StatusBadRequest, "CannotParseRequest", "The request is incorrectly formatted."}
	// ErrLimitExceeded is 400 LimitExceeded: a service limit (e.g. cores
	// of a shape) is reached.
	ErrLimitExceeded = APIError{http.StatusBadRequest, "LimitExceeded", "Fulfilling this request exceeds the Oracle-defined limit for this tenancy for this resource type."}
	// ErrNotAuthenticated is 401 NotAuthenticated: the request is not
	// signed, or not signed correctly by a known key.
	ErrNotAuthenticated = APIError{http.StatusUnauthorized, "NotAuthenticated", "The required information to complete authentication was not provided or was incorrect."}
	// ErrNotFound is 404 NotAuthorizedOrNotFound, OCI's answer both for a
	// resource that does not exist and for one the caller may not see.
	ErrNotFound = APIError{http.StatusNotFound, "NotAuthorizedOrNotFound", "Authorization failed or requested resource not found."}
	// ErrConflict is 409 Conflict, e.g. a retry token reused with another
	// request body.
	ErrConflict = APIError{http.StatusConflict, "Conflict", "The resource is in a conflicted state."}
	// ErrIncorrectState is 409 IncorrectState: the resource is in the wrong
	// lifecycle state for the operation.
	ErrIncorrectState = APIError{http.StatusConflict, "IncorrectState", "The requested state for the resource conflicts with its current state."}
	// ErrTooManyRequests is 429 TooManyRequests: the caller is throttled.
	ErrTooManyRequests = APIError{http.StatusTooManyRequests, "TooManyRequests", "Too many requests for the tenancy."}
	// ErrOutOfCapacity is what OCI answers when an availability domain has
	// no host for the shape: 500 InternalError "Out of host capacity.". The
	// SDK classifies it like any 5xx (retryable by its default retry
	// policy, which LaunchInstance does not use unless told to).
	ErrOutOfCapacity = APIError{http.StatusInternalServerError, "InternalError", "Out of host capacity."}
	// ErrInternal is 500 InternalError with OCI's generic message.
	ErrInternal = APIError{http.StatusInternalServerError, "InternalError", "Internal error occurred."}
	// ErrServiceUnavailable is 503 ServiceUnavailable.
	ErrServiceUnavailable = APIError{http.StatusServiceUnavailable, "ServiceUnavailable", "The service is currently unavailable."}
)
