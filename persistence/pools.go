package persistence

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// PlacementPool returns the record of the placement pool name and its
// sequence (the pool's version), or ErrNotFound with the sequence of its
// tombstone (0 if it never existed), which a re-creation must expect.
func (r *Reader) PlacementPool(name string) (*internalpb.PoolRecord, Seq, error) {
	rec := &internalpb.PoolRecord{}
	seq, err := r.entity(PlacementPoolKey(name), rec)
	return rec, seq, err
}

// PlacementPools calls fn for every placement pool record with its
// sequence, in name order, until fn returns an error (which PlacementPools
// returns).
func (r *Reader) PlacementPools(fn func(*internalpb.PoolRecord, Seq) error) error {
	return r.entitiesSeq(KindPlacementPool, func() proto.Message { return &internalpb.PoolRecord{} }, func(m proto.Message, seq Seq) error {
		return fn(m.(*internalpb.PoolRecord), seq)
	})
}

// DefaultPoolDisconnect is what a pool that says nothing (or
// UNSPECIFIED) about disconnected workers gets: the fence on, lost nodes'
// jobs replaced at once — for live video, at most one copy of a job on
// air and the shortest gap (docs/design/pools.md, "Disconnected workers").
func DefaultPoolDisconnect() *managerpb.PoolDisconnect {
	return &managerpb.PoolDisconnect{Fence: managerpb.PoolDisconnect_FENCE_ON, Replace: managerpb.PoolDisconnect_REPLACE_IMMEDIATELY}
}

// PoolDisconnect returns p's disconnect settings with every UNSPECIFIED
// field (a pool stored before the field existed, or no pool: p nil) set
// to DefaultPoolDisconnect's. It never returns nil and never modifies p.
func PoolDisconnect(p *managerpb.Pool) *managerpb.PoolDisconnect {
	out := DefaultPoolDisconnect()
	if d := p.GetDisconnect(); d != nil {
		if d.GetFence() != managerpb.PoolDisconnect_FENCE_UNSPECIFIED {
			out.Fence = d.GetFence()
		}
		if d.GetReplace() != managerpb.PoolDisconnect_REPLACE_UNSPECIFIED {
			out.Replace = d.GetReplace()
		}
	}
	return out
}
