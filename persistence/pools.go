package persistence

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
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
