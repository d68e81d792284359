package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"strconv"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// jobIDpb converts id to its wire form.
func jobIDpb(id JobID) *commonpb.JobId { return &commonpb.JobId{JobId: string(id)} }

// checkJob rejects a nil job or one without a job id, before it is sent.
func checkJob(method string, job *managerpb.Job) error {
	if job == nil {
		return invalidArg(method, "job is nil")
	}
	if job.GetJobId().GetJobId() == "" {
		return invalidArg(method, "job.job_id is empty")
	}
	return nil
}

// CreateJob creates job and returns its hash, the current_hash the next
// UpdateJob must carry. The job id is chosen by the caller and must be set
// (codes.InvalidArgument otherwise, without a call); codes.AlreadyExists
// means a job with that id exists. job is not modified.
func (m *NorskManager) CreateJob(ctx context.Context, job *managerpb.Job) (int64, error) {
	if err := checkJob("CreateJob", job); err != nil {
		return 0, err
	}
	h, err := unary(ctx, m, "CreateJob", job, m.api.CreateJob)
	return h.GetHash(), err
}

// UpdateJob replaces the job with job's id by job and returns the new hash.
// job.current_hash must be the hash last returned for the job (by
// CreateJob, UpdateJob or JobByID); codes.FailedPrecondition means the job
// has changed since (re-read it and retry), codes.NotFound that it does not
// exist. job is not modified.
func (m *NorskManager) UpdateJob(ctx context.Context, job *managerpb.Job) (int64, error) {
	if err := checkJob("UpdateJob", job); err != nil {
		return 0, err
	}
	h, err := unary(ctx, m, "UpdateJob", job, m.api.UpdateJob)
	return h.GetHash(), err
}

// DeleteJob deletes the job id (codes.NotFound if there is none).
func (m *NorskManager) DeleteJob(ctx context.Context, id JobID) error {
	if id == "" {
		return invalidArg("DeleteJob", "job id is empty")
	}
	_, err := unary(ctx, m, "DeleteJob", jobIDpb(id), m.api.DeleteJob)
	return err
}

// JobByID returns the job id with its history and running instances
// (codes.NotFound if there is none).
func (m *NorskManager) JobByID(ctx context.Context, id JobID) (*managerpb.JobByIdResponse, error) {
	if id == "" {
		return nil, invalidArg("JobById", "job id is empty")
	}
	return unary(ctx, m, "JobById", jobIDpb(id), m.api.JobById)
}

// JobSearch returns every job matching all of filters (none: every job),
// with its running instances, in the manager's order. The per-call timeout
// bounds the whole search. Use JobSearchSeq to process a large result as
// it arrives.
func (m *NorskManager) JobSearch(ctx context.Context, filters ...*managerpb.JobFilter) ([]*managerpb.CurrentJob, error) {
	ctx, cancel := m.callContext(ctx)
	defer cancel()
	var jobs []*managerpb.CurrentJob
	for job, err := range m.JobSearchSeq(ctx, filters...) {
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// JobSearchSeq is JobSearch as an iterator: it yields each matching job as
// the manager streams it; on failure it yields a nil job and the
// *CallError, then stops. Breaking out of the loop cancels the stream. The
// per-call timeout does not apply; bound the search with ctx.
func (m *NorskManager) JobSearchSeq(ctx context.Context, filters ...*managerpb.JobFilter) iter.Seq2[*managerpb.CurrentJob, error] {
	return func(yield func(*managerpb.CurrentJob, error) bool) {
		for i, f := range filters {
			if f == nil || f.GetJobFilter() == nil {
				yield(nil, invalidArg("JobSearch", "job filter "+strconv.Itoa(i)+" is empty"))
				return
			}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := m.api.JobSearch(ctx, &managerpb.JobSearchRequest{JobFilter: filters})
		if err != nil {
			yield(nil, m.callErr(ctx, "JobSearch", err, nil))
			return
		}
		recvAll(ctx, m, stream, "JobSearch", yield)
	}
}

// StartJob asks the manager to start the job id on node under role
// ("primary", "backup" or any other string). codes.NotFound names a missing
// job or node; codes.FailedPrecondition a job or node that cannot take it
// (completed job, node not started, role already running).
func (m *NorskManager) StartJob(ctx context.Context, id JobID, role string, node NodeID) error {
	req := &managerpb.StartJobRequest{JobId: jobIDpb(id), Role: role, NodeId: nodeIDpb(node)}
	if err := checkInstance("StartJob", id, role, node); err != nil {
		return err
	}
	_, err := unary(ctx, m, "StartJob", req, m.api.StartJob)
	return err
}

// StopJob asks the manager to stop the instance of job id running under
// role on node (codes.NotFound if there is no such instance).
func (m *NorskManager) StopJob(ctx context.Context, id JobID, role string, node NodeID) error {
	req := &managerpb.StopJobRequest{JobId: jobIDpb(id), Role: role, NodeId: nodeIDpb(node)}
	if err := checkInstance("StopJob", id, role, node); err != nil {
		return err
	}
	_, err := unary(ctx, m, "StopJob", req, m.api.StopJob)
	return err
}

// checkInstance rejects an empty job id, role or node id, before sending.
func checkInstance(method string, id JobID, role string, node NodeID) error {
	switch {
	case id == "":
		return invalidArg(method, "job id is empty")
	case role == "":
		return invalidArg(method, "role is empty")
	case node == "":
		return invalidArg(method, "node id is empty")
	}
	return nil
}

// CompleteJob marks the job id completed (state POST): every running
// instance is stopped and the job is not placed again.
func (m *NorskManager) CompleteJob(ctx context.Context, id JobID) error {
	if id == "" {
		return invalidArg("CompleteJob", "job id is empty")
	}
	_, err := unary(ctx, m, "CompleteJob", jobIDpb(id), m.api.CompleteJob)
	return err
}

// isEOF reports whether err is the clean end of a stream.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }
