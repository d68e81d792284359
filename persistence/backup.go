package persistence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
)

// Backups (docs/design/backup.md): a backup file is the store's snapshot
// stream (snapshot.go) inside the envelope of package backupfile. It is
// taken online from one badger read transaction, so it holds exactly the
// writes applied up to one index, and restored into a new data dir by
// norsk-manager restore.

// BackupInfo is what a backup records about the manager taking it.
type BackupInfo struct {
	// ManagerVersion is the manager's build (Meta.ManagerVersion).
	ManagerVersion string
	// Now is the clock of Meta.CreatedAt; nil means time.Now.
	Now func() time.Time
}

// Backup is one backup being taken: a read view of the store at one
// applied index, counted, and its metadata. WriteTo writes it; Close
// releases the view. Its methods other than WriteTo may be called from
// any goroutine.
type Backup struct {
	txn      *badger.Txn
	meta     backupfile.Meta
	hdr      SnapshotHeader
	estimate int64
	// written counts the records WriteTo has buffered so far.
	written atomic.Uint64
}

// BeginBackup opens a read view of the store's current state and counts
// its keys and bytes. In a cluster, call it after the read barrier, so that
// the view holds every write acknowledged before the request. It fails
// with ErrRestoring while a snapshot restore replaces the store's content.
// The caller must Close the Backup.
func (s *Store) BeginBackup(info BackupInfo) (*Backup, error) {
	now := time.Now
	if info.Now != nil {
		now = info.Now
	}
	txn := s.db.NewTransaction(false)
	b, err := s.beginBackup(txn, info.ManagerVersion, now().UTC())
	if err != nil {
		txn.Discard()
		return nil, err
	}
	return b, nil
}

func (s *Store) beginBackup(txn *badger.Txn, version string, at time.Time) (*Backup, error) {
	switch _, err := txn.Get(keyRestoring); {
	case err == nil:
		return nil, fmt.Errorf("begin backup: %w", ErrRestoring)
	case !errors.Is(err, badger.ErrKeyNotFound):
		return nil, fmt.Errorf("begin backup: %w", err)
	}
	applied, err := getU64(txn, keyApplied)
	if err != nil {
		return nil, fmt.Errorf("begin backup: %w", err)
	}
	head, err := getU64(txn, keyEvHead)
	if err != nil {
		return nil, fmt.Errorf("begin backup: %w", err)
	}
	count, body, err := snapshotStats(txn)
	if err != nil {
		return nil, fmt.Errorf("begin backup: count keys: %w", err)
	}
	m := s.readMarkerQuiet()
	meta := backupfile.Meta{StoreID: m.StoreID, StoreFormat: FormatVersion, Mode: string(m.Mode), AppliedIndex: applied,
		EventHead: head, Keys: count, CreatedAt: at, ManagerVersion: version}
	hb, err := backupfile.EncodeHeader(meta)
	if err != nil {
		return nil, fmt.Errorf("begin backup: %w", err)
	}
	return &Backup{
		txn:      txn,
		meta:     meta,
		hdr:      SnapshotHeader{Version: snapshotVersion, Format: FormatVersion, Applied: applied, Count: count},
		estimate: int64(len(hb)) + snapshotHeaderLen + body + sha256.Size + backupfile.ChecksumLen,
	}, nil
}

// snapshotStats counts the records a snapshot of txn holds and estimates
// their encoded size (lengths, keys and values; badger knows a large
// value's size only approximately without reading it).
func snapshotStats(txn *badger.Txn) (count uint64, size int64, err error) {
	it := txn.NewIterator(badger.IteratorOptions{})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if bytes.Equal(item.Key(), keyRestoring) {
			continue
		}
		count++
		size += 8 + item.KeySize() + item.ValueSize()
	}
	return count, size, nil
}

// readMarkerQuiet returns the data dir's marker, or the zero marker for an
// in-memory store or one whose marker cannot be read (the backup then
// records no store id).
func (s *Store) readMarkerQuiet() marker {
	var m marker
	if s.cfg.InMemory {
		return m
	}
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, markerFile))
	if err != nil {
		s.logger.Warn("backup: read the data dir's marker", "error", err)
		return m
	}
	if err := json.Unmarshal(b, &m); err != nil {
		s.logger.Warn("backup: decode the data dir's marker", "error", err)
	}
	return m
}

// Meta returns the backup's metadata (written at the start of the file).
func (b *Backup) Meta() backupfile.Meta { return b.meta }

// EstimatedSize returns the file's expected size in bytes: exact unless
// the store holds values large enough for badger's value log.
func (b *Backup) EstimatedSize() int64 { return b.estimate }

// KeysWritten returns how many records WriteTo has buffered so far.
func (b *Backup) KeysWritten() uint64 { return b.written.Load() }

// WriteTo writes the whole backup file to w and returns its size. Errors
// are w's or badger's; w may have received a prefix.
func (b *Backup) WriteTo(w io.Writer) (int64, error) {
	bw, err := backupfile.NewWriter(w, b.meta)
	if err != nil {
		return 0, fmt.Errorf("write backup: %w", err)
	}
	if err := writeSnapshotRecords(b.txn, bw, b.hdr, func() { b.written.Add(1) }); err != nil {
		return bw.Size(), fmt.Errorf("write backup: %w", err)
	}
	if err := bw.Close(); err != nil {
		return bw.Size(), fmt.Errorf("write backup: %w", err)
	}
	return bw.Size(), nil
}

// Close releases the read view. Idempotent.
func (b *Backup) Close() { b.txn.Discard() }

// VerifyBackup reads a whole backup file from r and checks everything: the
// envelope (magic, version, metadata), the snapshot's structure, records
// and checksum, that the metadata agrees with the snapshot's header, the
// file's checksum, and that nothing follows it. It returns the metadata.
// Errors say what is wrong; a bad file's wrap ErrCorrupt (and, for the
// envelope, a backupfile sentinel such as backupfile.ErrTruncated).
func VerifyBackup(r io.Reader) (backupfile.Meta, error) {
	m, _, _, err := verifyBackup(r)
	return m, err
}

// verifyBackup is VerifyBackup that also returns the header length and the
// snapshot stream's length.
func verifyBackup(r io.Reader) (m backupfile.Meta, hdrLen int, snapLen int64, err error) {
	h := sha256.New()
	br := bufio.NewReaderSize(r, 256<<10)
	m, hdrLen, err = backupfile.ReadHeader(io.TeeReader(br, h))
	if err != nil {
		return m, 0, 0, corruptBackup(err)
	}
	counted := &countWriter{w: h}
	sr := &snapshotReader{r: br, h: sha256.New(), spool: io.Discard, tee: counted}
	hdr, err := sr.verifyStream()
	if err != nil {
		return m, 0, 0, fmt.Errorf("backup's snapshot: %w", err)
	}
	switch {
	case hdr.Applied != m.AppliedIndex:
		return m, 0, 0, fmt.Errorf("backup metadata says applied index %d, its snapshot %d: %w", m.AppliedIndex, hdr.Applied, ErrCorrupt)
	case hdr.Count != m.Keys:
		return m, 0, 0, fmt.Errorf("backup metadata says %d keys, its snapshot %d: %w", m.Keys, hdr.Count, ErrCorrupt)
	}
	want := h.Sum(nil)
	got := make([]byte, backupfile.ChecksumLen)
	if _, err := io.ReadFull(br, got); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return m, 0, 0, corruptBackup(fmt.Errorf("the file ends before its checksum: %w", backupfile.ErrTruncated))
		}
		return m, 0, 0, err
	}
	if !bytes.Equal(got, want) {
		return m, 0, 0, corruptBackup(fmt.Errorf("the SHA-256 at the end of the file does not match its content: %w", backupfile.ErrChecksum))
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = corruptBackup(errors.New("the file has data after its checksum"))
		}
		return m, 0, 0, err
	}
	return m, hdrLen, counted.n, nil
}

// corruptBackup wraps an envelope error with ErrCorrupt.
func corruptBackup(err error) error { return fmt.Errorf("%w (%w)", err, ErrCorrupt) }

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// RestoreBackup verifies the backup file at path (VerifyBackup) and, if it
// is sound, replaces the store's content with its snapshot
// (RestoreSnapshot, whose rules apply: no log may be running). A bad file
// changes nothing. It returns the backup's metadata.
func (s *Store) RestoreBackup(path string) (backupfile.Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return backupfile.Meta{}, err
	}
	defer f.Close()
	m, hdrLen, snapLen, err := verifyBackup(f)
	if err != nil {
		return m, err
	}
	if _, err := f.Seek(int64(hdrLen), io.SeekStart); err != nil {
		return m, err
	}
	if err := s.RestoreSnapshot(io.LimitReader(f, snapLen)); err != nil {
		return m, err
	}
	return m, nil
}
