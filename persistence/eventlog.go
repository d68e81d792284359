package persistence

import (
	"errors"
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
	// Sizes are the stored (encoded) sizes of Events in bytes, as
	// ReadEventPageAdmit's admit was told them (nil from ReadEventPage).
	Sizes []int64
	// Refused is the stored size of the event ReadEventPageAdmit's admit
	// refused, which ended the page (0: none was refused).
	Refused int64
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
	return s.ReadEventPageAdmit(from, max, nil)
}

// ReadEventPageAdmit is ReadEventPage that bounds the page in bytes: before
// decoding each event it calls admit with the event's stored (encoded)
// size in bytes, and ends the page at the first event admit refuses
// (EventPage.Refused is then its size, and the page may be empty). admit
// runs inside the read view: it must not block. With admit set the events
// are read one key at a time (the retained log is dense: every index from
// first to head has its key), not with an iterator: badger's iterator
// copies the values of the items it fills ahead of the one returned,
// which would hold events the bound has not admitted. A nil admit takes
// every event. Errors as ReadEventPage; ErrCorrupt also for a retained
// index without its event.
func (s *Store) ReadEventPageAdmit(from Index, max int, admit func(size int64) bool) (EventPage, error) {
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
		if admit != nil {
			return readAdmitted(txn, &p, from, max, admit)
		}
		prefix := []byte(prefixEv)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: min(max, 100)})
		defer it.Close()
		for it.Seek(evKey(from)); it.ValidForPrefix(prefix) && len(p.Events) < max; it.Next() {
			ev, err := decodeEvent(it.Item())
			if err != nil {
				return err
			}
			p.Events = append(p.Events, ev)
		}
		return nil
	})
	return p, err
}

// readAdmitted reads the events from..p.Head (at most max) into p, one key
// at a time, as admit lets it.
func readAdmitted(txn *badger.Txn, p *EventPage, from Index, max int, admit func(size int64) bool) error {
	for i := from; i <= p.Head && len(p.Events) < max; i++ {
		item, err := txn.Get(evKey(i))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("event %d of the retained log %d..%d is missing: %w", i, p.First, p.Head, ErrCorrupt)
		}
		if err != nil {
			return err
		}
		size := item.ValueSize()
		if !admit(size) {
			p.Refused = size
			return nil
		}
		ev, err := decodeEvent(item)
		if err != nil {
			return err
		}
		p.Events = append(p.Events, ev)
		p.Sizes = append(p.Sizes, size)
	}
	return nil
}

// decodeEvent decodes a stored event.
func decodeEvent(item *badger.Item) (*internalpb.StoredEvent, error) {
	ev := &internalpb.StoredEvent{}
	if err := item.Value(func(b []byte) error { return proto.Unmarshal(b, ev) }); err != nil {
		return nil, fmt.Errorf("decode event %x: %v: %w", item.Key(), err, ErrCorrupt)
	}
	return ev, nil
}
