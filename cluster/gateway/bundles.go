package gateway

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// bundleCmd sends cmd to the bundle grain id with a fresh request id.
func (s *Server) bundleCmd(ctx context.Context, id string, cmd *internalpb.BundleCommand) (*internalpb.Reply, error) {
	cmd.BundleId = id
	if cmd.RequestId == "" {
		cmd.RequestId = newRequestID()
	}
	cmd.Audit = bundleAudit(ctx, id, cmd)
	return s.request(ctx, actors.KindBundle, id, cmd)
}

// CreateBundle validates and stores a bundle and answers once its derived
// jobs exist, with its id (a random UUID if the request has none).
// InvalidArgument names the offending field; AlreadyExists if the bundle
// id, or the id of one of its derived jobs, is taken.
func (s *Server) CreateBundle(ctx context.Context, b *managerpb.Bundle) (*managerpb.CreateBundleResponse, error) {
	b = proto.Clone(b).(*managerpb.Bundle)
	if b.GetBundleId().GetBundleId() == "" {
		b.BundleId = &managerpb.BundleId{BundleId: newUUID()}
	}
	clearTemplateOutputs(b)
	if err := validateBundle(b); err != nil {
		return nil, err
	}
	id := b.GetBundleId().GetBundleId()
	r, err := s.bundleCmd(ctx, id, &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Create{Create: &internalpb.CreateBundle{Bundle: b}}})
	if err != nil {
		return nil, err
	}
	return r.GetCreateBundle(), nil
}

// UpdateBundle replaces a bundle's definition and answers once the derived
// jobs reflect it (jobs removed from the bundle are completed and deleted
// in the background). NotFound for an unknown bundle, FailedPrecondition
// for one being deleted, AlreadyExists (nothing written) if a derived job
// id new to the bundle is taken by an existing job, whatever its tags.
func (s *Server) UpdateBundle(ctx context.Context, b *managerpb.Bundle) (*emptypb.Empty, error) {
	b = proto.Clone(b).(*managerpb.Bundle)
	clearTemplateOutputs(b)
	if err := validateBundle(b); err != nil {
		return nil, err
	}
	id := b.GetBundleId().GetBundleId()
	_, err := s.bundleCmd(ctx, id, &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Update{Update: &internalpb.UpdateBundle{Bundle: b}}})
	return empty(err)
}

// DeleteBundle moves a bundle to DELETING and answers; its derived jobs are
// then completed and deleted, and bundle_deleted on the event stream marks
// the end. NotFound for an unknown bundle; deleting a DELETING bundle is OK.
func (s *Server) DeleteBundle(ctx context.Context, in *managerpb.BundleId) (*emptypb.Empty, error) {
	if err := checkBundleID("bundle_id", in.GetBundleId()); err != nil {
		return nil, err
	}
	_, err := s.bundleCmd(ctx, in.GetBundleId(), &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Delete{Delete: &internalpb.DeleteBundle{}}})
	return empty(err)
}

// StartBundleJob removes the dormant tag of one derived job and answers
// once the job no longer carries it. NotFound for an unknown bundle or job,
// FailedPrecondition for a bundle being deleted.
func (s *Server) StartBundleJob(ctx context.Context, in *managerpb.StartBundleJobRequest) (*emptypb.Empty, error) {
	return s.setDormant(ctx, in.GetBundleId(), in.GetReplicaIndex(), in.GetJobName(), false)
}

// StopBundleJob stamps the dormant tag on one derived job again; errors as
// StartBundleJob.
func (s *Server) StopBundleJob(ctx context.Context, in *managerpb.StopBundleJobRequest) (*emptypb.Empty, error) {
	return s.setDormant(ctx, in.GetBundleId(), in.GetReplicaIndex(), in.GetJobName(), true)
}

func (s *Server) setDormant(ctx context.Context, bid *managerpb.BundleId, replica uint32, name string, dormant bool) (*emptypb.Empty, error) {
	id, err := bundleJobRef(bid, replica, name)
	if err != nil {
		return nil, err
	}
	_, err = s.bundleCmd(ctx, id, &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_SetDormant{SetDormant: &internalpb.SetBundleJobDormant{
		ReplicaIndex: replica, JobName: name, Dormant: dormant}}})
	return empty(err)
}

// GetBundle returns a bundle with the state of its derived jobs, read from
// the local replica after the barrier. NotFound for an unknown bundle (and
// for one whose delete saga finished).
func (s *Server) GetBundle(ctx context.Context, in *managerpb.BundleId) (*managerpb.BundleInfo, error) {
	if err := checkBundleID("bundle_id", in.GetBundleId()); err != nil {
		return nil, err
	}
	var info *managerpb.BundleInfo
	err := s.view(ctx, func(r *persistence.Reader) error {
		rec, _, err := r.Bundle(in.GetBundleId())
		if err != nil {
			return err
		}
		info = bundle.Info(rec)
		return addBundlePlacement(r, info)
	})
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "bundle %q not found", in.GetBundleId())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return redactFor(s, ctx, info), nil
}

// ListBundles returns the bundles (DELETING ones included) in id order,
// from one consistent read after the barrier, with the event-log index it
// was read at. Paged as ListNodes (paging.go): a caller following the
// bundles' events resumes from the first page's log_index.
func (s *Server) ListBundles(ctx context.Context, in *managerpb.ListBundlesRequest) (*managerpb.ListBundlesResponse, error) {
	pg, err := newPager("bundles", in.GetPageSize(), in.GetPageToken(), s.listBudget())
	if err != nil {
		return nil, err
	}
	resp := &managerpb.ListBundlesResponse{}
	err = s.view(ctx, func(r *persistence.Reader) error {
		head, err := r.EventHead()
		if err != nil {
			return err
		}
		resp.LogIndex = uint64(head)
		return pg.done(r.Bundles(func(rec *internalpb.BundleRecord) error {
			id := rec.GetBundle().GetBundleId().GetBundleId()
			if pg.skip(id) {
				return nil
			}
			info := bundle.Info(rec)
			if err := addBundlePlacement(r, info); err != nil {
				return err
			}
			if !pg.fits(id, info) {
				return errPageFull
			}
			resp.Bundles = append(resp.Bundles, info)
			return nil
		}))
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.NextPageToken = pg.next
	return redactFor(s, ctx, resp), nil
}
