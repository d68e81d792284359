package ec2emu

import (
	"net/http"
	"time"
)

// Error codes the emulator answers with, or that tests commonly inject.
// They are the codes of the real service; the SDK reports them as
// smithy.APIError.ErrorCode().
const (
	// Client errors (HTTP 400 unless noted).
	CodeInvalidInstanceIDNotFound         = "InvalidInstanceID.NotFound"
	CodeInvalidInstanceIDMalformed        = "InvalidInstanceID.Malformed"
	CodeInvalidGroupNotFound              = "InvalidGroup.NotFound"
	CodeInvalidLaunchTemplateIDNotFound   = "InvalidLaunchTemplateId.NotFound"
	CodeInvalidLaunchTemplateNameNotFound = "InvalidLaunchTemplateName.NotFoundException"
	CodeInvalidLaunchTemplateVersion      = "InvalidLaunchTemplateId.VersionNotFound"
	CodeInvalidParameterValue             = "InvalidParameterValue"
	CodeInvalidParameterCombination       = "InvalidParameterCombination"
	CodeMissingParameter                  = "MissingParameter"
	CodeIdempotentParameterMismatch       = "IdempotentParameterMismatch"
	CodeInsufficientFreeAddresses         = "InsufficientFreeAddressesInSubnet"
	CodeInstanceLimitExceeded             = "InstanceLimitExceeded"
	CodeVcpuLimitExceeded                 = "VcpuLimitExceeded"
	CodeInvalidAction                     = "InvalidAction"
	CodeNoSuchVersion                     = "NoSuchVersion"
	// CodeAuthFailure is HTTP 401.
	CodeAuthFailure = "AuthFailure"
	// CodeUnauthorizedOperation is HTTP 403.
	CodeUnauthorizedOperation = "UnauthorizedOperation"
	// CodeDryRunOperation is HTTP 412: the answer to DryRun=true.
	CodeDryRunOperation = "DryRunOperation"

	// Throttling: HTTP 503, like the real service.
	CodeRequestLimitExceeded = "RequestLimitExceeded"

	// Server errors.
	// CodeInsufficientInstanceCapacity is HTTP 500, the status the real
	// service is observed to send (EC2 lists it among its server errors).
	// Because of the 500 the SDK's standard retryer retries it.
	CodeInsufficientInstanceCapacity = "InsufficientInstanceCapacity"
	CodeInsufficientCapacity         = "InsufficientCapacity"
	CodeInternalError                = "InternalError"
	// CodeUnavailable is HTTP 503.
	CodeUnavailable        = "Unavailable"
	CodeServiceUnavailable = "ServiceUnavailable"
)

// StatusFor returns the HTTP status the real EC2 service sends with error
// code: 401 AuthFailure, 403 UnauthorizedOperation, 412 DryRunOperation,
// 503 RequestLimitExceeded / Unavailable / ServiceUnavailable, 500 for the
// other server errors (InternalError, InternalFailure and the
// Insufficient*Capacity family), and 400 for everything else.
func StatusFor(code string) int {
	switch code {
	case CodeAuthFailure:
		return http.StatusUnauthorized
	case CodeUnauthorizedOperation:
		return http.StatusForbidden
	case CodeDryRunOperation:
		return http.StatusPreconditionFailed
	case CodeRequestLimitExceeded, CodeUnavailable, CodeServiceUnavailable:
		return http.StatusServiceUnavailable
	case CodeInternalError, "InternalFailure",
		CodeInsufficientInstanceCapacity, CodeInsufficientCapacity,
		"InsufficientAddressCapacity", "InsufficientHostCapacity",
		"InsufficientReservedInstanceCapacity":
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// Fault is one injected failure of one call (see InjectFault and
// InjectLostResponse).
type Fault struct {
	// Code is the EC2 error code (e.g. CodeRequestLimitExceeded;
	// CodeInternalError if empty). Ignored when Drop is set.
	Code string
	// Message is the error message (a generic one derived from Code if
	// empty).
	Message string
	// Status is the HTTP status (StatusFor(Code) if 0).
	Status int
	// Drop closes the connection without any answer instead: the SDK sees
	// a transport error (which its standard retryer retries).
	Drop bool
	// Delay is slept before answering (cut short if the client goes
	// away): a slow service, for testing the caller's timeouts.
	Delay time.Duration
}

// FaultOf is the Fault for code with its real HTTP status and a generic
// message.
func FaultOf(code string) Fault { return Fault{Code: code} }

// Faults is n copies of FaultOf(code), for InjectFault(action,
// Faults(code, n)...).
func Faults(code string, n int) []Fault {
	fs := make([]Fault, n)
	for i := range fs {
		fs[i] = FaultOf(code)
	}
	return fs
}

func (f Fault) status() int {
	if f.Status != 0 {
		return f.Status
	}
	return StatusFor(f.Code)
}

func (f Fault) message() string {
	if f.Message != "" {
		return f.Message
	}
	switch f.Code {
	case CodeRequestLimitExceeded:
		return "Request limit exceeded."
	case CodeInsufficientInstanceCapacity:
		return "We currently do not have sufficient capacity in the Availability Zone you requested."
	case CodeUnavailable, CodeServiceUnavailable:
		return "The server is overloaded and can't handle the request."
	case CodeInternalError:
		return "An internal error has occurred."
	}
	return "injected fault " + f.Code
}
