package persistence

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Bundle returns the bundle record of id and its sequence, or ErrNotFound
// (also for a bundle whose delete saga finished: its tombstone).
func (r *Reader) Bundle(id string) (*internalpb.BundleRecord, Seq, error) {
	rec := &internalpb.BundleRecord{}
	seq, err := r.entity(BundleKey(id), rec)
	return rec, seq, err
}

// Bundles calls fn for every live bundle record (DELETING ones included),
// in bundle-id order, until fn returns an error (which Bundles returns).
func (r *Reader) Bundles(fn func(*internalpb.BundleRecord) error) error {
	return r.entities(KindBundle, func() proto.Message { return &internalpb.BundleRecord{} }, func(m proto.Message) error {
		return fn(m.(*internalpb.BundleRecord))
	})
}

// PendingBundles calls fn with the id of every bundle whose grain has work
// left (BundleRecord.pending_work: a derived job not synced, a removal
// left, or the bundle is DELETING), in id order (keys only).
func (r *Reader) PendingBundles(fn func(id string) error) error {
	return r.scanKeys([]byte(ixBundlePending), func(rest []byte) error { return fn(string(rest)) })
}
