package persistence

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// EventBounds returns the oldest retained and newest event-log index as the
// FSM last published them (a cached value: no store read). With an empty
// log first is head+1.
//
// The cache is updated after the transaction that writes the events
// commits, so for a moment it can lag behind what a read already sees: an
// index taken from ReadEvents may be head+1 or more. It is never ahead of
// the readable log. Use it to wait (WaitForEvents) and to report; to
// compare the head with indexes read from the log, read both in one view
// (ReadEventPage, Reader.EventBounds).
func (s *Store) EventBounds() (first, head Index) { return s.fsm.EventBounds() }

// EventPage is one read of the event log: the events found and the log's
// bounds, all as of the same view, so that every event's index is at most
// Head.
type EventPage struct {
	// Events are the events read, in index order.
	Events []*internalpb.StoredEvent
	// First is the oldest retained index and Head the newest (0: empty
	// log); with an empty log First is Head+1.
	First, Head Index
}

// ReadEvents returns up to max events with log index ≥ from, in index
// order. It returns ErrEventsTrimmed if from is older than the oldest
// retained event, and an empty slice if from is beyond the head.
func (s *Store) ReadEvents(from Index, max int) ([]*internalpb.StoredEvent, error) {
	p, err := s.ReadEventPage(from, max)
	return p.Events, err
}

// ReadEventPage is ReadEvents that also returns the log's bounds as of the
// same view. Errors as ReadEvents (ErrEventsTrimmed naming both indexes;
// ErrCorrupt for an event that does not decode).
func (s *Store) ReadEventPage(from Index, max int) (EventPage, error) {
	var p EventPage
	err := s.db.View(func(txn *badger.Txn) error {
		r := &Reader{txn: txn}
		first, head, err := r.EventBounds()
		if err != nil {
			return err
		}
		p.First, p.Head = first, head
		if from < first {
			return fmt.Errorf("read events from %d (oldest retained %d): %w", from, first, ErrEventsTrimmed)
		}
		prefix := []byte(prefixEv)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: min(max, 100)})
		defer it.Close()
		for it.Seek(evKey(from)); it.ValidForPrefix(prefix) && len(p.Events) < max; it.Next() {
			ev := &internalpb.StoredEvent{}
			if err := it.Item().Value(func(b []byte) error { return proto.Unmarshal(b, ev) }); err != nil {
				return fmt.Errorf("decode event %x: %v: %w", it.Item().Key(), err, ErrCorrupt)
			}
			p.Events = append(p.Events, ev)
		}
		return nil
	})
	return p, err
}
