package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// BundleID identifies a bundle (norsk.api.manager.BundleId on the wire).
type BundleID string

// bundleIDpb converts id to its wire form.
func bundleIDpb(id BundleID) *managerpb.BundleId { return &managerpb.BundleId{BundleId: string(id)} }

// CreateBundle creates a bundle (AutoManager v1) and returns its id: the
// bundle's own, or one the manager assigned if it had none. The manager
// expands it into derived jobs ("<bundle id>.<replica>.<job name>") and
// answers once they exist. codes.InvalidArgument names the offending field;
// codes.AlreadyExists means the bundle id, or a derived job id, is taken.
// bundle is not modified.
func (m *NorskManager) CreateBundle(ctx context.Context, bundle *managerpb.Bundle) (BundleID, error) {
	if bundle == nil {
		return "", invalidArg("CreateBundle", "bundle is nil")
	}
	r, err := unary(ctx, m, "CreateBundle", bundle, m.api.CreateBundle)
	return BundleID(r.GetBundleId().GetBundleId()), err
}

// UpdateBundle replaces the bundle with bundle's id by bundle and returns
// once the derived jobs reflect it (jobs no longer in the bundle are
// completed and deleted in the background). codes.NotFound: no such
// bundle; codes.FailedPrecondition: the bundle is being deleted.
func (m *NorskManager) UpdateBundle(ctx context.Context, bundle *managerpb.Bundle) error {
	if bundle.GetBundleId().GetBundleId() == "" {
		return invalidArg("UpdateBundle", "bundle.bundle_id is empty")
	}
	_, err := unary(ctx, m, "UpdateBundle", bundle, m.api.UpdateBundle)
	return err
}

// DeleteBundle starts the stop-then-delete saga of bundle id and returns
// once the bundle is DELETING; a bundle_deleted event marks the end, when
// its jobs are completed and deleted and the bundle is gone.
// codes.NotFound: no such bundle.
func (m *NorskManager) DeleteBundle(ctx context.Context, id BundleID) error {
	if id == "" {
		return invalidArg("DeleteBundle", "bundle id is empty")
	}
	_, err := unary(ctx, m, "DeleteBundle", bundleIDpb(id), m.api.DeleteBundle)
	return err
}

// StartBundleJob activates a dormant derived job (replica 0 primary, 1
// backup): the manager removes its dormant tag. codes.NotFound: no such
// bundle or job; codes.FailedPrecondition: the bundle is being deleted.
func (m *NorskManager) StartBundleJob(ctx context.Context, id BundleID, replica uint32, jobName string) error {
	if id == "" || jobName == "" {
		return invalidArg("StartBundleJob", "bundle id and job name must be set")
	}
	_, err := unary(ctx, m, "StartBundleJob", &managerpb.StartBundleJobRequest{BundleId: bundleIDpb(id), ReplicaIndex: replica, JobName: jobName}, m.api.StartBundleJob)
	return err
}

// StopBundleJob makes a derived job dormant again (the manager stamps its
// dormant tag). Errors as StartBundleJob.
func (m *NorskManager) StopBundleJob(ctx context.Context, id BundleID, replica uint32, jobName string) error {
	if id == "" || jobName == "" {
		return invalidArg("StopBundleJob", "bundle id and job name must be set")
	}
	_, err := unary(ctx, m, "StopBundleJob", &managerpb.StopBundleJobRequest{BundleId: bundleIDpb(id), ReplicaIndex: replica, JobName: jobName}, m.api.StopBundleJob)
	return err
}

// GetBundle returns bundle id with the state of its derived jobs.
// codes.NotFound: no such bundle (or its delete saga has finished).
func (m *NorskManager) GetBundle(ctx context.Context, id BundleID) (*managerpb.BundleInfo, error) {
	if id == "" {
		return nil, invalidArg("GetBundle", "bundle id is empty")
	}
	return unary(ctx, m, "GetBundle", bundleIDpb(id), m.api.GetBundle)
}

// ListBundles returns every bundle in id order, DELETING ones included,
// reading every page, with the event-log index the first page was read at
// (an event stream resumed from it misses no change made while paging).
func (m *NorskManager) ListBundles(ctx context.Context) (*managerpb.ListBundlesResponse, error) {
	var out *managerpb.ListBundlesResponse
	err := allPages(ctx, "ListBundles", func(ctx context.Context, token string) (string, int, error) {
		resp, err := unary(ctx, m, "ListBundles", &managerpb.ListBundlesRequest{PageToken: token}, m.api.ListBundles)
		if err != nil {
			return "", 0, err
		}
		if out == nil {
			out = resp
		} else {
			out.Bundles = append(out.Bundles, resp.GetBundles()...)
		}
		return resp.GetNextPageToken(), len(resp.GetBundles()), nil
	})
	if err != nil {
		return nil, err
	}
	out.NextPageToken = ""
	return out, nil
}
