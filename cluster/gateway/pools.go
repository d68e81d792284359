package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Pool writes (docs/design/pools.md, "Writes"). A pool is configuration
// with no side effects, so it has no grain: the gateway reads the record
// after the barrier, decides, and appends through the journal expecting
// the sequence it read. A concurrent writer makes the append fail with a
// sequence conflict, and the decision is taken again on a fresh read (at
// most poolAttempts times, then Aborted).
const (
	poolAttempts      = 3
	poolAppendTimeout = 10 * time.Second
	// PoolTag is the job tag that names the pool of a plain auto-placed
	// job (issue 11 §2); DeletePool refuses a pool such a job names.
	PoolTag = persistence.PoolTag
	// maxRefsShown bounds how many referrers a refused DeletePool names.
	maxRefsShown = 5
)

// errPoolRetry asks the pool write loop to decide again on a fresh read.
var errPoolRetry = errors.New("gateway: pool changed concurrently")

// CreatePool stores a new pool. InvalidArgument names the offending
// field; AlreadyExists if a pool of that name exists. Answers once the
// pool is committed, with a pool_updated event.
func (s *Server) CreatePool(ctx context.Context, p *managerpb.Pool) (*emptypb.Empty, error) {
	next, err := validatePool(p)
	if err != nil {
		return nil, err
	}
	return empty(s.writePool(ctx, next.GetName(), func(_ *internalpb.PoolRecord, _ persistence.Seq, found bool) (poolChange, error) {
		if found {
			return poolChange{}, status.Errorf(codes.AlreadyExists, "pool %q already exists (change it with UpdatePool)", next.GetName())
		}
		return poolChange{next: &internalpb.PoolRecord{Pool: next}}, nil
	}))
}

// UpdatePool replaces a pool's definition. pool.version must be the
// version GetPool or ListPools returned: FailedPrecondition, naming the
// current version, if the pool changed since (re-read and retry), and
// InvalidArgument if it is 0. NotFound for a missing pool. An update that
// changes nothing writes nothing (no event, the version stays).
func (s *Server) UpdatePool(ctx context.Context, p *managerpb.Pool) (*emptypb.Empty, error) {
	next, err := validatePool(p)
	if err != nil {
		return nil, err
	}
	if p.GetVersion() == 0 {
		return nil, invalid("pool.version", "must be the pool's current version (GetPool shows it); an update without one could overwrite a change it never saw")
	}
	name := next.GetName()
	return empty(s.writePool(ctx, name, func(cur *internalpb.PoolRecord, seq persistence.Seq, found bool) (poolChange, error) {
		switch {
		case !found:
			return poolChange{}, status.Errorf(codes.NotFound, "pool %q not found", name)
		case uint64(seq) != p.GetVersion():
			return poolChange{}, status.Errorf(codes.FailedPrecondition,
				"pool %q is at version %d, not %d: it changed since it was read; read it again (GetPool) and retry", name, seq, p.GetVersion())
		case proto.Equal(cur.GetPool(), next):
			return poolChange{}, nil
		}
		return poolChange{next: &internalpb.PoolRecord{Pool: next, RecentRequests: cur.GetRecentRequests()}}, nil
	}))
}

// DeletePool deletes a pool. NotFound for a missing pool;
// FailedPrecondition, naming them, while a bundle that is not being
// deleted names it (Bundle.pool or resilience_policy.pool) or a job with
// auto_placement that is not completed carries the tag pool=NAME. The
// check and the delete are not one transaction: a bundle created naming
// the pool while it is being deleted is not refused (its jobs are then
// reported unplaceable by the placement engine, as for any unknown pool).
func (s *Server) DeletePool(ctx context.Context, in *managerpb.PoolName) (*emptypb.Empty, error) {
	name := in.GetName()
	if err := checkPoolName("name", name); err != nil {
		return nil, err
	}
	return empty(s.writePool(ctx, name, func(_ *internalpb.PoolRecord, _ persistence.Seq, found bool) (poolChange, error) {
		if !found {
			return poolChange{}, status.Errorf(codes.NotFound, "pool %q not found", name)
		}
		if err := s.poolInUse(name); err != nil {
			return poolChange{}, err
		}
		return poolChange{del: true}, nil
	}))
}

// GetPool returns a pool with its version, read from the local replica
// after the barrier. NotFound for a missing pool.
func (s *Server) GetPool(ctx context.Context, in *managerpb.PoolName) (*managerpb.Pool, error) {
	name := in.GetName()
	if err := checkPoolName("name", name); err != nil {
		return nil, err
	}
	var out *managerpb.Pool
	err := s.view(ctx, func(r *persistence.Reader) error {
		rec, seq, err := r.PlacementPool(name)
		if err != nil {
			return err
		}
		out = poolWithVersion(rec, seq)
		return s.withTierStatus(r, out)
	})
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "pool %q not found", name)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

// ListPools returns the pools with their versions, in name order, from
// one consistent read after the barrier, with the event-log index it was
// read at. Paged as ListNodes (paging.go).
func (s *Server) ListPools(ctx context.Context, in *managerpb.ListPoolsRequest) (*managerpb.ListPoolsResponse, error) {
	pg, err := newPager("pools", in.GetPageSize(), in.GetPageToken(), s.listBudget())
	if err != nil {
		return nil, err
	}
	resp := &managerpb.ListPoolsResponse{}
	err = s.view(ctx, func(r *persistence.Reader) error {
		head, err := r.EventHead()
		if err != nil {
			return err
		}
		resp.LogIndex = uint64(head)
		var pools []*managerpb.Pool
		if err := r.PlacementPools(func(rec *internalpb.PoolRecord, seq persistence.Seq) error {
			if !pg.skip(rec.GetPool().GetName()) {
				pools = append(pools, poolWithVersion(rec, seq))
			}
			return nil
		}); err != nil {
			return err
		}
		if err := s.withTierStatus(r, pools...); err != nil {
			return err
		}
		for _, p := range pools {
			if !pg.fits(p.GetName(), p) {
				break
			}
			resp.Pools = append(resp.Pools, p)
		}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.NextPageToken = pg.next
	return resp, nil
}

// poolWithVersion returns the pool of rec with its version set to seq.
func poolWithVersion(rec *internalpb.PoolRecord, seq persistence.Seq) *managerpb.Pool {
	p := proto.Clone(rec.GetPool()).(*managerpb.Pool)
	p.Version = uint64(seq)
	return p
}

// poolChange is what a pool write decided: store next, delete the pool
// (del), or, the zero value, write nothing.
type poolChange struct {
	next *internalpb.PoolRecord
	del  bool
}

// poolDecision decides a pool write on the record read after the barrier
// (found false: no pool, and seq is its tombstone's): the change, or the
// error to answer.
type poolDecision func(cur *internalpb.PoolRecord, seq persistence.Seq, found bool) (poolChange, error)

// writePool reads pool name after the barrier, decides, and commits the
// decision expecting the sequence read, deciding again after a conflict.
func (s *Server) writePool(ctx context.Context, name string, decide poolDecision) error {
	if s.cfg.Journal == nil {
		return status.Error(codes.Unimplemented, "this manager was started without a journal for pool writes")
	}
	if err := s.requireLeader(ctx); err != nil {
		return err
	}
	for range poolAttempts {
		var cur *internalpb.PoolRecord
		var seq persistence.Seq
		var found bool
		err := s.view(ctx, func(r *persistence.Reader) error {
			var err error
			cur, seq, err = r.PlacementPool(name)
			found = err == nil
			if errors.Is(err, persistence.ErrNotFound) {
				err = nil
			}
			return err
		})
		if err != nil {
			return toStatus(err)
		}
		change, err := decide(cur, seq, found)
		if err != nil {
			return err
		}
		if change.next == nil && !change.del {
			return nil
		}
		err = s.commitPool(ctx, name, seq, change.next)
		if !errors.Is(err, errPoolRetry) {
			return err
		}
	}
	return status.Errorf(codes.Aborted, "pool %q was changed by other requests %d times while this one was decided; retry", name, poolAttempts)
}

// commitPool appends next (nil: the deletion) expecting seq, with its
// event; errPoolRetry on a sequence conflict.
func (s *Server) commitPool(ctx context.Context, name string, seq persistence.Seq, next *internalpb.PoolRecord) error {
	reqID := newRequestID()
	var ev *managerpb.EventStreamEvent
	if next != nil {
		next.RecentRequests = actors.RememberRequest(next.GetRecentRequests(), reqID)
		ev = &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_PoolUpdated{PoolUpdated: &managerpb.PoolUpdated{
			Pool: poolWithVersion(next, seq+1)}}}
	} else {
		ev = &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_PoolDeleted{PoolDeleted: &managerpb.PoolDeleted{
			Name: &managerpb.PoolName{Name: name}}}}
	}
	var rec proto.Message
	if next != nil {
		rec = next
	}
	_, fail := actors.CommitAudited(s.cfg.Journal, persistence.PlacementPoolKey(name), seq, reqID, rec,
		[]*managerpb.EventStreamEvent{ev}, s.cfg.Clock(), poolAppendTimeout, poolAudit(ctx, name, seq, next == nil))
	switch {
	case fail == nil:
		s.log.Info("pool changed", "pool", name, "version", seq+1, "deleted", next == nil)
		return nil
	case fail.GetCode() == errorpb.Code_ABORTED:
		return errPoolRetry
	}
	if ctx.Err() != nil {
		return toStatus(ctx.Err())
	}
	return replyStatus(fail, nil)
}

// poolInUse returns FailedPrecondition naming the live bundles and the
// auto-placed jobs not yet completed that name pool, or nil. Called by a
// decision, right after writePool's read behind the barrier, so it reads
// the local store directly.
func (s *Server) poolInUse(pool string) error {
	var bundles, jobs []string
	err := s.cfg.Store.View(func(r *persistence.Reader) error {
		if err := r.Bundles(func(rec *internalpb.BundleRecord) error {
			b := rec.GetBundle()
			if b.GetState() != managerpb.BundleState_BUNDLE_STATE_DELETING &&
				(b.GetPool() == pool || b.GetResiliencePolicy().GetPool() == pool) {
				bundles = append(bundles, b.GetBundleId().GetBundleId())
			}
			return nil
		}); err != nil {
			return err
		}
		q, err := persistence.CompileJobQuery([]*managerpb.JobFilter{{JobFilter: &managerpb.JobFilter_TagFilter{
			TagFilter: &managerpb.TagFilter{TagName: PoolTag, Comparison: &managerpb.TagFilter_Eq{Eq: pool}}}}})
		if err != nil {
			return err
		}
		return r.SearchJobs(q, func(rec *internalpb.JobRecord) error {
			j := rec.GetJob().GetJob()
			if j.AutoPlacement != nil && j.GetState() != managerpb.Job_POST {
				jobs = append(jobs, j.GetJobId().GetJobId())
			}
			return nil
		})
	})
	if err != nil {
		return toStatus(err)
	}
	if len(bundles) == 0 && len(jobs) == 0 {
		return nil
	}
	var parts []string
	if len(bundles) > 0 {
		parts = append(parts, fmt.Sprintf("bundles %s", shortList(bundles)))
	}
	if len(jobs) > 0 {
		parts = append(parts, fmt.Sprintf("auto-placed jobs %s (tag %s=%s)", shortList(jobs), PoolTag, pool))
	}
	return status.Errorf(codes.FailedPrecondition, "pool %q is in use by %s: change or delete them first",
		pool, strings.Join(parts, " and "))
}

// shortList renders ids as "a, b, c" with at most maxRefsShown of them
// and the count of the rest.
func shortList(ids []string) string {
	if len(ids) <= maxRefsShown {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:maxRefsShown], ", "), len(ids)-maxRefsShown)
}
