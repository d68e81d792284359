package replication

import (
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// reasonNoSpace is the google.rpc.ErrorInfo reason of a forwarded append
// the leader refused because its data dir is under its free-space reserve
// (persistence.NoSpaceError): nothing was appended. Errors cross the wire as
// codes (STYLE §5), so the forwarder rebuilds the *NoSpaceError from the
// detail's metadata rather than from the message.
const reasonNoSpace = "DATA_DIR_LOW_SPACE"

// noSpaceStatus is the RESOURCE_EXHAUSTED status answering a forwarded
// append refused for space, carrying ns's fields.
func noSpaceStatus(ns *persistence.NoSpaceError) error {
	st, err := status.New(codes.ResourceExhausted, ns.Error()).WithDetails(&errdetails.ErrorInfo{
		Reason: reasonNoSpace, Domain: workerauth.ErrorDomain,
		Metadata: map[string]string{
			"data_dir":       ns.Dir,
			"free_bytes":     strconv.FormatUint(ns.Free, 10),
			"min_free_bytes": strconv.FormatUint(ns.MinFree, 10),
			"manager":        ns.Manager,
		},
	})
	if err != nil {
		return status.Error(codes.ResourceExhausted, ns.Error())
	}
	return st.Err()
}

// noSpaceFromStatus returns the *NoSpaceError a leader's noSpaceStatus
// carries, or nil when err is something else.
func noSpaceFromStatus(err error) *persistence.NoSpaceError {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return nil
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetReason() != reasonNoSpace || info.GetDomain() != workerauth.ErrorDomain {
			continue
		}
		md := info.GetMetadata()
		free, _ := strconv.ParseUint(md["free_bytes"], 10, 64)
		minFree, _ := strconv.ParseUint(md["min_free_bytes"], 10, 64)
		return &persistence.NoSpaceError{Dir: md["data_dir"], Free: free, MinFree: minFree, Manager: md["manager"]}
	}
	return nil
}

// admitSpace asks the store's free-space guard whether this manager (the
// leader) may append an entry of n bytes; a refusal names this manager.
func (r *Replicator) admitSpace(n int) error {
	err := r.cfg.Store.DiskGuard().Admit(n)
	var ns *persistence.NoSpaceError
	if errors.As(err, &ns) {
		ns.Manager = r.cfg.Name
		return ns
	}
	return err
}
