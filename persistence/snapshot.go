package persistence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/dgraph-io/badger/v4"
)

// Snapshot format, version 1. A snapshot is every key/value of the store
// (all prefixes of keys.go except meta/restoring) read from one badger read
// transaction, so it is one consistent applied state. All integers are
// big-endian:
//
//	header   magic    8 bytes "NMSNAP\r\n"
//	         version  u32 = 1 (snapshotVersion)
//	         format   u32   the store's FormatVersion
//	         applied  u64   meta/applied of the snapshot (0: nothing applied)
//	         count    u64   number of records that follow
//	records  count × { key length u32, value length u32, key, value }, in key order
//	trailer  SHA-256 of header and records (32 bytes), then end of stream
//
// Version history: 1 — the first.
const (
	snapshotMagic   = "NMSNAP\r\n"
	snapshotVersion = 1

	snapshotHeaderLen = 8 + 4 + 4 + 8 + 8
	// snapshotMaxValue bounds a record's value (badger's own limit is
	// lower); larger lengths mean a corrupt stream.
	snapshotMaxValue = 1 << 30
	// badgerMaxKeyLen is badger's key size limit.
	badgerMaxKeyLen = 65000
)

// SnapshotHeader describes a snapshot (see the format above).
type SnapshotHeader struct {
	// Version is the snapshot format version.
	Version uint32
	// Format is the store FormatVersion of the records.
	Format uint32
	// Applied is the log index of the last batch applied to the snapshotted
	// state (meta/applied); 0 if none.
	Applied uint64
	// Count is the number of key/value records.
	Count uint64
}

// WriteSnapshot streams the whole store (the FSM's badger DB, not the Raft
// store) to w from one read transaction, in the format described above.
// It may run concurrently with applies: the snapshot is the state of one
// applied index. Errors are w's or badger's; w may have received a prefix.
func (s *Store) WriteSnapshot(w io.Writer) error {
	txn := s.db.NewTransaction(false)
	defer txn.Discard()
	return writeSnapshot(txn, w)
}

// writeSnapshot streams the state txn sees to w.
func writeSnapshot(txn *badger.Txn, w io.Writer) error {
	applied, err := getU64(txn, keyApplied)
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	var count uint64
	err = eachKV(txn, false, func(k, _ []byte) error {
		count++
		return nil
	})
	if err != nil {
		return fmt.Errorf("write snapshot: count keys: %w", err)
	}
	return writeSnapshotRecords(txn, w, SnapshotHeader{Version: snapshotVersion, Format: FormatVersion, Applied: applied, Count: count}, nil)
}

// writeSnapshotRecords streams the header hdr (whose Applied and Count the
// caller read from txn) and the records txn sees to w, calling onRecord
// (if set) after each record is buffered.
func writeSnapshotRecords(txn *badger.Txn, w io.Writer, hdr SnapshotHeader, onRecord func()) error {
	count := hdr.Count
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 256<<10)
	if _, err := bw.Write(hdr.encode()); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	var written uint64
	err := eachKV(txn, true, func(k, v []byte) error {
		var lens [8]byte
		binary.BigEndian.PutUint32(lens[:4], uint32(len(k)))
		binary.BigEndian.PutUint32(lens[4:], uint32(len(v)))
		if _, err := bw.Write(lens[:]); err != nil {
			return err
		}
		if _, err := bw.Write(k); err != nil {
			return err
		}
		_, err := bw.Write(v)
		written++
		if onRecord != nil {
			onRecord()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if written != count {
		// Impossible within one read transaction; refuse to produce a
		// snapshot that would not restore.
		return fmt.Errorf("write snapshot: counted %d keys but streamed %d", count, written)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// eachKV calls fn for every key (except meta/restoring) in key order, with
// its value if values is set. k and v are valid only during the call.
func eachKV(txn *badger.Txn, values bool, fn func(k, v []byte) error) error {
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: values, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if bytes.Equal(k, keyRestoring) {
			continue
		}
		if !values {
			if err := fn(k, nil); err != nil {
				return err
			}
			continue
		}
		if err := item.Value(func(v []byte) error { return fn(k, v) }); err != nil {
			return err
		}
	}
	return nil
}

func (h SnapshotHeader) encode() []byte {
	b := make([]byte, 0, snapshotHeaderLen)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, h.Version)
	b = binary.BigEndian.AppendUint32(b, h.Format)
	b = binary.BigEndian.AppendUint64(b, h.Applied)
	return binary.BigEndian.AppendUint64(b, h.Count)
}

// ReadSnapshotHeader reads and checks the header at the start of a
// snapshot stream (magic, version, store format); it does not verify the
// rest. Errors wrap ErrCorrupt, or are r's.
func ReadSnapshotHeader(r io.Reader) (SnapshotHeader, error) {
	var b [snapshotHeaderLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return SnapshotHeader{}, fmt.Errorf("snapshot header truncated: %w", ErrCorrupt)
		}
		return SnapshotHeader{}, err
	}
	return decodeSnapshotHeader(b[:])
}

func decodeSnapshotHeader(b []byte) (SnapshotHeader, error) {
	if string(b[:8]) != snapshotMagic {
		return SnapshotHeader{}, fmt.Errorf("not a norsk-manager snapshot (magic %q): %w", b[:8], ErrCorrupt)
	}
	h := SnapshotHeader{
		Version: binary.BigEndian.Uint32(b[8:]),
		Format:  binary.BigEndian.Uint32(b[12:]),
		Applied: binary.BigEndian.Uint64(b[16:]),
		Count:   binary.BigEndian.Uint64(b[24:]),
	}
	switch {
	case h.Version != snapshotVersion:
		return SnapshotHeader{}, fmt.Errorf("snapshot format version %d, this build reads %d: %w", h.Version, snapshotVersion, ErrCorrupt)
	case h.Format != FormatVersion:
		return SnapshotHeader{}, fmt.Errorf("snapshot of store format %d, this build reads %d: %w", h.Format, FormatVersion, ErrCorrupt)
	}
	return h, nil
}

// RestoreSnapshot replaces the store's whole content with the snapshot read
// from r (written by WriteSnapshot) and reloads the FSM's cached meta
// (applied index, event bounds). It first reads the entire stream into a
// temporary file in the data dir, checking its structure and checksum: a
// truncated or corrupt snapshot, or one of another format, is refused with
// an error wrapping ErrCorrupt and the store is not touched.
//
// It must not run concurrently with any write (raft never runs Restore
// concurrently with Apply; LocalLog must not be running). Readers may run
// but see the store empty or partly restored while it proceeds, and the
// event log may move backwards. The replacement is not atomic: it marks
// the store (meta/restoring) first and clears the mark last, so a crash
// midway leaves a store that RestoreInterrupted reports and that refuses
// applies until a restore completes.
func (s *Store) RestoreSnapshot(r io.Reader) error {
	spool, hdr, err := s.spoolSnapshot(r)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	if _, err := spool.Seek(snapshotHeaderLen, io.SeekStart); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	s.fsm.setRestoring()
	if err := s.replaceContent(bufio.NewReaderSize(spool, 256<<10), hdr); err != nil {
		if rerr := s.fsm.reload(); rerr != nil {
			s.logger.Error("reload store meta after a failed restore", "error", rerr)
		}
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if err := s.fsm.reload(); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	s.logger.Info("restored snapshot", "applied", hdr.Applied, "keys", hdr.Count)
	return nil
}

// RestoreInterrupted reports whether the store holds the remains of a
// snapshot restore that did not finish (a crash during RestoreSnapshot):
// its content is incomplete, applies fail, and it must be restored again
// (in the HA manager: start raft with NoSnapshotRestoreOnStart false; see
// RaftFSM.NeedsSnapshotRestore).
func (s *Store) RestoreInterrupted() bool { return s.fsm.restoreInterrupted() }

// spoolSnapshot copies r into a temporary file while checking its
// structure and checksum, and returns the file (positioned anywhere) with
// the header. On error the file is removed.
func (s *Store) spoolSnapshot(r io.Reader) (*os.File, SnapshotHeader, error) {
	dir := s.cfg.Dir
	if s.cfg.InMemory {
		dir = ""
	}
	f, err := os.CreateTemp(dir, "snapshot-restore-*.tmp")
	if err != nil {
		return nil, SnapshotHeader{}, err
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	sr := &snapshotReader{r: bufio.NewReaderSize(r, 256<<10), h: sha256.New(), spool: bw}
	hdr, err := sr.verify()
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, SnapshotHeader{}, err
	}
	return f, hdr, nil
}

// snapshotReader reads a snapshot stream, hashing and spooling what it
// reads.
type snapshotReader struct {
	r     *bufio.Reader
	h     hash.Hash
	spool io.Writer
	// tee, if set, receives every byte read, the trailer included (the
	// checksum of a backup file that holds the stream).
	tee io.Writer
	err error // the first read error (a truncation wraps ErrCorrupt)
}

// read reads n bytes into buf (grown as needed) and returns them, hashed
// and spooled unless trailer is set.
func (sr *snapshotReader) read(buf []byte, n int, trailer bool) []byte {
	if sr.err != nil {
		return nil
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(sr.r, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("snapshot truncated: %w", ErrCorrupt)
		}
		sr.err = err
		return nil
	}
	if sr.tee != nil {
		sr.tee.Write(buf)
	}
	if !trailer {
		sr.h.Write(buf)
		if _, err := sr.spool.Write(buf); err != nil {
			sr.err = err
			return nil
		}
	}
	return buf
}

// verify reads the whole stream and checks header, records, checksum and
// the end of the stream.
func (sr *snapshotReader) verify() (SnapshotHeader, error) {
	hdr, err := sr.verifyStream()
	if err != nil {
		return hdr, err
	}
	if _, err := sr.r.ReadByte(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("snapshot has data after its checksum: %w", ErrCorrupt)
		}
		return hdr, err
	}
	return hdr, nil
}

// verifyStream reads the stream up to its checksum and checks header,
// records and checksum; it does not read further.
func (sr *snapshotReader) verifyStream() (SnapshotHeader, error) {
	b := sr.read(nil, snapshotHeaderLen, false)
	if sr.err != nil {
		return SnapshotHeader{}, sr.err
	}
	hdr, err := decodeSnapshotHeader(b)
	if err != nil {
		return SnapshotHeader{}, err
	}
	lens, buf := make([]byte, 8), []byte(nil)
	for i := uint64(0); i < hdr.Count; i++ {
		sr.read(lens, 8, false)
		if sr.err != nil {
			return hdr, sr.err
		}
		kl, vl := binary.BigEndian.Uint32(lens), binary.BigEndian.Uint32(lens[4:])
		if kl == 0 || kl > badgerMaxKeyLen || vl > snapshotMaxValue {
			return hdr, fmt.Errorf("snapshot record %d: key of %d bytes, value of %d: %w", i, kl, vl, ErrCorrupt)
		}
		buf = sr.read(buf, int(kl)+int(vl), false)
		if sr.err != nil {
			return hdr, sr.err
		}
	}
	want := sr.h.Sum(nil)
	got := sr.read(nil, sha256.Size, true)
	if sr.err != nil {
		return hdr, sr.err
	}
	if !bytes.Equal(got, want) {
		return hdr, fmt.Errorf("snapshot checksum mismatch: %w", ErrCorrupt)
	}
	return hdr, nil
}

// replaceContent deletes the store's content and writes the (verified)
// records from r. The restore mark is written first and removed last.
func (s *Store) replaceContent(r *bufio.Reader, hdr SnapshotHeader) error {
	if err := s.db.Update(func(txn *badger.Txn) error { return setU64(txn, keyRestoring, hdr.Applied) }); err != nil {
		return fmt.Errorf("mark restore: %w", err)
	}
	if err := s.deleteAllButMark(); err != nil {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	var lens [8]byte
	for i := uint64(0); i < hdr.Count; i++ {
		if _, err := io.ReadFull(r, lens[:]); err != nil {
			return fmt.Errorf("reread snapshot: %w", err)
		}
		kl, vl := binary.BigEndian.Uint32(lens[:4]), binary.BigEndian.Uint32(lens[4:])
		kv := make([]byte, int(kl)+int(vl))
		if _, err := io.ReadFull(r, kv); err != nil {
			return fmt.Errorf("reread snapshot: %w", err)
		}
		if bytes.Equal(kv[:kl], keyRestoring) {
			continue
		}
		if err := wb.Set(kv[:kl:kl], kv[kl:]); err != nil {
			return fmt.Errorf("write snapshot record: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("write snapshot records: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("sync restored store: %w", err)
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(keyRestoring) }); err != nil {
		return fmt.Errorf("clear restore mark: %w", err)
	}
	return nil
}

// deleteAllButMark deletes every key except meta/restoring, with ordinary
// (MVCC) deletes: badger's DropPrefix and DropAll are not isolated from
// read transactions, and a raft snapshot being persisted from one may run
// during a restore.
func (s *Store) deleteAllButMark() error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); !bytes.Equal(k, keyRestoring) {
				if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return fmt.Errorf("delete store content: %w", err)
	}
	return nil
}
