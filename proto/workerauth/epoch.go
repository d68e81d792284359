package workerauth

import (
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReasonStaleSessionEpoch is the reason a worker gives (in a
// google.rpc.ErrorInfo detail of ErrorDomain, with the metadata key
// MetadataKeyEpoch) when it refuses a session whose epoch is lower than
// one it already verified. The manager then dials again above that epoch
// at once, instead of one epoch higher per backed-off attempt: after a
// store restored from an old backup the gap can be large.
const ReasonStaleSessionEpoch = "STALE_SESSION_EPOCH"

// MetadataKeyEpoch is the ErrorInfo metadata key carrying the highest
// epoch the worker verified (decimal).
const MetadataKeyEpoch = "epoch"

// StaleEpochError is the worker's refusal of a session with epoch got
// when it already verified have: FailedPrecondition with the reason and
// have in an ErrorInfo detail.
func StaleEpochError(got, have uint64) error {
	st := status.New(codes.FailedPrecondition,
		fmt.Sprintf("worker: stale session: epoch %d is lower than epoch %d already verified on this worker", got, have))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonStaleSessionEpoch, Domain: ErrorDomain,
		Metadata: map[string]string{MetadataKeyEpoch: strconv.FormatUint(have, 10)}}); err == nil {
		st = d
	}
	return st.Err()
}

// StaleEpochOf returns the epoch a StaleEpochError names, and whether err
// is one.
func StaleEpochOf(err error) (uint64, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return 0, false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain && ei.GetReason() == ReasonStaleSessionEpoch {
			e, err := strconv.ParseUint(ei.GetMetadata()[MetadataKeyEpoch], 10, 64)
			return e, err == nil
		}
	}
	return 0, false
}
