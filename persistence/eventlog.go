package persistence

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// EventBounds returns the oldest retained and newest event-log index. With
// an empty log first is head+1.
func (s *Store) EventBounds() (first, head Index) { return s.fsm.EventBounds() }

// ReadEvents returns up to max events with log index ≥ from, in index
// order. It returns ErrEventsTrimmed if from is older than the oldest
// retained event, and an empty slice if from is beyond the head.
func (s *Store) ReadEvents(from Index, max int) ([]*internalpb.StoredEvent, error) {
	var out []*internalpb.StoredEvent
	err := s.db.View(func(txn *badger.Txn) error {
		first, err := getU64(txn, keyEvFirst)
		if err != nil {
			return err
		}
		if first == 0 {
			first = 1
		}
		if uint64(from) < first {
			return fmt.Errorf("read events from %d (oldest retained %d): %w", from, first, ErrEventsTrimmed)
		}
		prefix := []byte(prefixEv)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: min(max, 100)})
		defer it.Close()
		for it.Seek(evKey(from)); it.ValidForPrefix(prefix) && len(out) < max; it.Next() {
			ev := &internalpb.StoredEvent{}
			if err := it.Item().Value(func(b []byte) error { return proto.Unmarshal(b, ev) }); err != nil {
				return fmt.Errorf("decode event %x: %v: %w", it.Item().Key(), err, ErrCorrupt)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}
