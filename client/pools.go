package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// CreatePool creates a placement pool (docs/design/pools.md): a name and
// tiers ordered cheap to expensive. The manager fills in the default
// restart ceiling (5 failures in 10 minutes) when pool has none.
// codes.InvalidArgument names the offending field; codes.AlreadyExists
// means a pool of that name exists. pool is not modified.
func (m *NorskManager) CreatePool(ctx context.Context, pool *managerpb.Pool) error {
	if pool == nil {
		return invalidArg("CreatePool", "pool is nil")
	}
	_, err := unary(ctx, m, "CreatePool", pool, m.api.CreatePool)
	return err
}

// UpdatePool replaces the pool with pool's name by pool. pool.Version
// must be the version GetPool or ListPools returned:
// codes.FailedPrecondition (naming the current version) if the pool
// changed since, codes.InvalidArgument if it is 0, codes.NotFound if there
// is no such pool. An update that changes nothing keeps the version.
func (m *NorskManager) UpdatePool(ctx context.Context, pool *managerpb.Pool) error {
	if pool.GetName() == "" {
		return invalidArg("UpdatePool", "pool.name is empty")
	}
	_, err := unary(ctx, m, "UpdatePool", pool, m.api.UpdatePool)
	return err
}

// DeletePool deletes pool name. codes.NotFound: no such pool;
// codes.FailedPrecondition: a bundle or an auto-placed job still names it
// (the message names them).
func (m *NorskManager) DeletePool(ctx context.Context, name string) error {
	if name == "" {
		return invalidArg("DeletePool", "pool name is empty")
	}
	_, err := unary(ctx, m, "DeletePool", &managerpb.PoolName{Name: name}, m.api.DeletePool)
	return err
}

// GetPool returns pool name with its version (for UpdatePool).
// codes.NotFound: no such pool.
func (m *NorskManager) GetPool(ctx context.Context, name string) (*managerpb.Pool, error) {
	if name == "" {
		return nil, invalidArg("GetPool", "pool name is empty")
	}
	return unary(ctx, m, "GetPool", &managerpb.PoolName{Name: name}, m.api.GetPool)
}

// ListPools returns every pool in name order, each with its version,
// reading every page, and the event-log index the first page was read at
// (resume an event stream from it to see every later pool change).
func (m *NorskManager) ListPools(ctx context.Context) (*managerpb.ListPoolsResponse, error) {
	var out *managerpb.ListPoolsResponse
	err := allPages(ctx, "ListPools", func(ctx context.Context, token string) (string, int, error) {
		resp, err := unary(ctx, m, "ListPools", &managerpb.ListPoolsRequest{PageToken: token}, m.api.ListPools)
		if err != nil {
			return "", 0, err
		}
		if out == nil {
			out = resp
		} else {
			out.Pools = append(out.Pools, resp.GetPools()...)
		}
		return resp.GetNextPageToken(), len(resp.GetPools()), nil
	})
	if err != nil {
		return nil, err
	}
	out.NextPageToken = ""
	return out, nil
}
