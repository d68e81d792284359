package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// WarningHeader is the gRPC response header in which a manager answers the
// warnings of a write it accepted, one value each (the gateway's
// WarningHeader): CreateJob and UpdateJob warn of a job's extra security
// group that does not exist in the region of an AWS tier of its pool
// (docs/design/pools.md, "Security groups of a job in an AWS tier").
const WarningHeader = "norsk-warning"

// CreateJobWarnings is CreateJob that also returns the manager's warnings
// about the job it stored (none from a manager that sends none). The
// errors are CreateJob's.
func (m *NorskManager) CreateJobWarnings(ctx context.Context, job *managerpb.Job) (int64, []string, error) {
	if err := checkJob("CreateJob", job); err != nil {
		return 0, nil, err
	}
	var md metadata.MD
	h, err := unary(ctx, m, "CreateJob", job, withHeader(&md, m.api.CreateJob))
	return h.GetHash(), md.Get(WarningHeader), err
}

// UpdateJobWarnings is UpdateJob that also returns the manager's warnings
// about the job it stored. The errors are UpdateJob's.
func (m *NorskManager) UpdateJobWarnings(ctx context.Context, job *managerpb.Job) (int64, []string, error) {
	if err := checkJob("UpdateJob", job); err != nil {
		return 0, nil, err
	}
	var md metadata.MD
	h, err := unary(ctx, m, "UpdateJob", job, withHeader(&md, m.api.UpdateJob))
	return h.GetHash(), md.Get(WarningHeader), err
}

// withHeader wraps a unary call so that it receives the response header
// into md.
func withHeader[Req, Resp any](md *metadata.MD, fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) func(context.Context, Req, ...grpc.CallOption) (Resp, error) {
	return func(ctx context.Context, req Req, opts ...grpc.CallOption) (Resp, error) {
		return fn(ctx, req, append(opts, grpc.Header(md))...)
	}
}
