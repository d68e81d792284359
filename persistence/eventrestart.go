package persistence

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/dgraph-io/badger/v4"
)

// Restarting the event log (docs/design/backup.md, "Event indexes after a
// restore"). A restored or recovered store is a new history: the managers
// it came from may have gone on past its state and numbered events it will
// never have, and it will number its own new events. A client resuming
// from an index of the old history must get a stream_reset, never events
// of the new history under indexes it has already seen. RestartEventLog
// therefore moves the head far beyond any index the old history could have
// reached and keeps no events: every index below the new head is older
// than the oldest retained one and every index above it is beyond the
// head, so the event stream resets both (as etcd's snapshot restore does
// with --bump-revision and --mark-compacted).

const (
	// MinEventSkip is the least a restart moves the event head: an old
	// history would have to number more than a trillion events after the
	// snapshot for one of its indexes to be taken for a new one.
	MinEventSkip = 1 << 40
)

// RandomEventSkip returns a skip for RestartEventLog in [MinEventSkip,
// 2·MinEventSkip): random, so that two stores restored from the same
// backup number their events differently, and small enough that indexes
// stay below 2^53 (exact in JavaScript numbers) for thousands of restarts.
func RandomEventSkip() uint64 { return MinEventSkip + rand.Uint64N(MinEventSkip) }

// RestartEventLog starts a new event log after the store's content was
// restored from a backup or recovered: it moves the event head forward by
// skip, deletes every retained event (the oldest retained index becomes
// the new head + 1, so nothing is retained) and records the new head as
// the log's base (EventLogBase). It returns the new head.
//
// It must not run concurrently with applies (no log may be running). The
// new bounds are written before the old events are deleted: a crash in
// between leaves events below the oldest retained index, which are never
// read, and running it again deletes them.
func (s *Store) RestartEventLog(skip uint64) (Index, error) {
	if skip == 0 {
		return 0, fmt.Errorf("restart event log: skip must be at least 1")
	}
	_, head := s.fsm.EventBounds()
	if uint64(head) > math.MaxUint64-skip-1 {
		return 0, fmt.Errorf("restart event log: head %d + skip %d overflows", head, skip)
	}
	base := uint64(head) + skip
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := setU64(txn, keyEvHead, base); err != nil {
			return err
		}
		if err := setU64(txn, keyEvFirst, base+1); err != nil {
			return err
		}
		return setU64(txn, keyEvBase, base)
	})
	if err != nil {
		return 0, fmt.Errorf("restart event log: %w", err)
	}
	if err := s.deletePrefix([]byte(prefixEv)); err != nil {
		return 0, fmt.Errorf("restart event log: delete old events: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return 0, fmt.Errorf("restart event log: %w", err)
	}
	if err := s.fsm.reload(); err != nil {
		return 0, fmt.Errorf("restart event log: %w", err)
	}
	s.logger.Info("event log restarted", "old_head", head, "new_head", base)
	return Index(base), nil
}

// EventLogBase returns the event index the log restarted after
// (RestartEventLog), 0 if it never did: indexes at or below it are from
// the history before a restore or recovery.
func (s *Store) EventLogBase() (Index, error) {
	var v uint64
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		v, err = getU64(txn, keyEvBase)
		return err
	})
	return Index(v), err
}

// deletePrefix deletes every key with prefix, with ordinary deletes
// (isolated from read transactions, unlike DropPrefix).
func (s *Store) deletePrefix(prefix []byte) error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return wb.Flush()
}
