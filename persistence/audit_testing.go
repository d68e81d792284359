package persistence

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// TamperAuditEntry changes one byte of the stored audit entry seq in the
// stopped data dir dataDir, through badger (so the store's own checksums
// still pass and only the hash chain can tell): the first byte of the
// entry's payload, or of its kind when the payload is empty, becomes
// another printable character. It is test surgery for the tampered-copy
// tests of the audit log (norsk-manager verify must name seq); never run
// it on a data dir you keep. Errors: the data dir cannot be opened, or it
// holds no entry seq (ErrNotFound).
func TamperAuditEntry(dataDir string, seq uint64) error {
	cfg := DefaultConfig(dataDir)
	cfg.GCInterval, cfg.MinFreeDisk = 0, 0
	s, err := Open(cfg)
	if err != nil {
		return err
	}
	err = s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(auditKey(seq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("audit entry %d: %w", seq, ErrNotFound)
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		e, err := getAuditEntry(txn, seq)
		if err != nil {
			return err
		}
		field := e.GetPayload()
		if field == "" {
			field = e.GetKind()
		}
		i := bytes.Index(v, []byte(field))
		if field == "" || i < 0 {
			return fmt.Errorf("audit entry %d: nothing to change", seq)
		}
		if v[i] == 'x' {
			v[i] = 'y'
		} else {
			v[i] = 'x'
		}
		return txn.Set(auditKey(seq), v)
	})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
