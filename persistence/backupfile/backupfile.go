// Package backupfile is the file format of a manager backup: what
// "norsk-ctl operator snapshot save" writes and "norsk-manager restore"
// reads (docs/design/backup.md). It owns the envelope only — a versioned
// header with JSON metadata in front of the store's snapshot stream
// (persistence/snapshot.go) and a SHA-256 of everything before it — and
// knows nothing of badger or the stream's records, so that norsk-ctl can
// write and check backup files without linking the store.
//
// Format, version 1. Integers are big-endian:
//
//	magic     8 bytes "NMBACKUP"
//	version   u32 = 1 (Version)
//	meta len  u32, at most MaxMetaLen
//	meta      meta len bytes: Meta as JSON
//	snapshot  the store snapshot stream (self-delimiting; its own header,
//	          record count and SHA-256)
//	checksum  SHA-256 of every byte above (32 bytes), then end of file
//
// Version history: 1 — the first.
package backupfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

const (
	// Magic starts every backup file.
	Magic = "NMBACKUP"
	// Version is the envelope version this package writes and reads.
	Version = 1
	// MaxMetaLen bounds the metadata; a larger length means a corrupt file.
	MaxMetaLen = 64 << 10
	// ChecksumLen is the length of the trailing SHA-256.
	ChecksumLen = sha256.Size

	fixedLen = 8 + 4 + 4
)

var (
	// ErrNotBackup is wrapped when a file does not start with Magic.
	ErrNotBackup = errors.New("backupfile: not a norsk-manager backup file")
	// ErrVersion is wrapped when a file's envelope version is not Version.
	ErrVersion = errors.New("backupfile: unsupported backup format version")
	// ErrTruncated is wrapped when a file ends before its header, metadata
	// or checksum is complete.
	ErrTruncated = errors.New("backupfile: backup file truncated")
	// ErrChecksum is wrapped when a file's trailing SHA-256 does not match
	// its content (a corrupt or truncated file).
	ErrChecksum = errors.New("backupfile: backup file checksum mismatch")
	// ErrMeta is wrapped when a file's metadata is not valid.
	ErrMeta = errors.New("backupfile: backup metadata unreadable")
)

// Meta describes a backup: where and when it was taken and what the
// snapshot inside holds. It is written before the snapshot, so it carries
// only what is known when the snapshot starts.
type Meta struct {
	// StoreID is the id of the data dir the snapshot was read from (its
	// marker's store_id; each member of a cluster has its own).
	StoreID string `json:"store_id,omitempty"`
	// StoreFormat is the store's FormatVersion of the records.
	StoreFormat uint32 `json:"store_format"`
	// Mode is the mode of the manager that took it ("single" or
	// "cluster").
	Mode string `json:"mode,omitempty"`
	// AppliedIndex is the log index of the last write in the snapshot: every
	// write committed at or below it is inside, none above it.
	AppliedIndex uint64 `json:"applied_index"`
	// EventHead is the newest event-log index in the snapshot (0: none).
	EventHead uint64 `json:"event_head"`
	// Keys is the number of key/value records of the snapshot.
	Keys uint64 `json:"keys"`
	// CreatedAt is when the snapshot's read view was taken (UTC).
	CreatedAt time.Time `json:"created_at"`
	// ManagerVersion is the build of the manager that wrote it.
	ManagerVersion string `json:"manager_version,omitempty"`
}

// EncodeHeader returns the bytes a backup file starts with: magic,
// version, metadata length and metadata. It fails only if the metadata
// would exceed MaxMetaLen.
func EncodeHeader(m Meta) ([]byte, error) {
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("backupfile: encode metadata: %w", err)
	}
	if len(mb) > MaxMetaLen {
		return nil, fmt.Errorf("backupfile: metadata of %d bytes exceeds %d", len(mb), MaxMetaLen)
	}
	b := make([]byte, 0, fixedLen+len(mb))
	b = append(b, Magic...)
	b = binary.BigEndian.AppendUint32(b, Version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(mb)))
	return append(b, mb...), nil
}

// ReadHeader reads the header at the start of r and returns the metadata
// and the header's length in bytes (where the snapshot starts). It checks
// the magic, the version and the metadata, not the rest of the file.
// Errors wrap ErrNotBackup, ErrVersion, ErrTruncated or ErrMeta, or are
// r's.
func ReadHeader(r io.Reader) (Meta, int, error) {
	var fixed [fixedLen]byte
	if err := readFull(r, fixed[:], "header"); err != nil {
		return Meta{}, 0, err
	}
	if string(fixed[:8]) != Magic {
		return Meta{}, 0, fmt.Errorf("starts with %q, not %q: %w", fixed[:8], Magic, ErrNotBackup)
	}
	if v := binary.BigEndian.Uint32(fixed[8:]); v != Version {
		return Meta{}, 0, fmt.Errorf("backup format version %d, this build reads %d: %w", v, Version, ErrVersion)
	}
	n := binary.BigEndian.Uint32(fixed[12:])
	if n > MaxMetaLen {
		return Meta{}, 0, fmt.Errorf("metadata length %d exceeds %d: %w", n, MaxMetaLen, ErrMeta)
	}
	mb := make([]byte, n)
	if err := readFull(r, mb, "metadata"); err != nil {
		return Meta{}, 0, err
	}
	var m Meta
	dec := json.NewDecoder(bytes.NewReader(mb))
	if err := dec.Decode(&m); err != nil {
		return Meta{}, 0, fmt.Errorf("metadata is not valid JSON: %v: %w", err, ErrMeta)
	}
	return m, fixedLen + int(n), nil
}

func readFull(r io.Reader, b []byte, what string) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("the file ends inside its %s: %w", what, ErrTruncated)
		}
		return err
	}
	return nil
}

// Writer writes one backup file: NewWriter writes the header, Write the
// snapshot stream, Close the checksum. It does not close the underlying
// writer. Not safe for concurrent use.
type Writer struct {
	w      io.Writer
	h      hash.Hash
	n      int64
	err    error
	closed bool
}

// NewWriter writes the header for m to w and returns the Writer for the
// snapshot stream.
func NewWriter(w io.Writer, m Meta) (*Writer, error) {
	hdr, err := EncodeHeader(m)
	if err != nil {
		return nil, err
	}
	bw := &Writer{w: w, h: sha256.New()}
	if _, err := bw.Write(hdr); err != nil {
		return nil, err
	}
	return bw, nil
}

// Write writes snapshot bytes (hashed). After an error every call returns
// it.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, errors.New("backupfile: write after Close")
	}
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Close writes the checksum. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	sum := w.h.Sum(nil)
	n, err := w.w.Write(sum)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return err
}

// Size returns the bytes written so far, checksum included once closed.
func (w *Writer) Size() int64 { return w.n }

// Verify reads a whole backup file from r: the header, then everything up
// to the end, and checks that the last ChecksumLen bytes are the SHA-256
// of all that precede them. It returns the metadata and the file's size.
// It does not parse the snapshot inside (the store checks it when it
// restores, see persistence.VerifyBackup). Errors wrap the sentinels of
// this package (ErrChecksum for a truncated or altered file), or are r's.
func Verify(r io.Reader) (Meta, int64, error) {
	h := sha256.New()
	br := bufio.NewReaderSize(r, 256<<10)
	m, hdrLen, err := ReadHeader(io.TeeReader(br, h))
	if err != nil {
		return Meta{}, 0, err
	}
	hb := &holdBack{h: h}
	n, err := io.Copy(hb, br)
	if err != nil {
		return Meta{}, 0, err
	}
	size := int64(hdrLen) + n
	if len(hb.tail) < ChecksumLen {
		return Meta{}, 0, fmt.Errorf("the file ends %d bytes after its metadata, before a checksum: %w", n, ErrTruncated)
	}
	if !bytes.Equal(hb.tail, h.Sum(nil)) {
		return Meta{}, 0, fmt.Errorf("the SHA-256 at the end of the file (%d bytes) does not match its content (truncated or altered): %w", size, ErrChecksum)
	}
	return m, size, nil
}

// holdBack hashes everything written to it except the last ChecksumLen
// bytes, which it keeps in tail.
type holdBack struct {
	h    hash.Hash
	tail []byte
}

func (hb *holdBack) Write(p []byte) (int, error) {
	hb.tail = append(hb.tail, p...)
	if over := len(hb.tail) - ChecksumLen; over > 0 {
		hb.h.Write(hb.tail[:over])
		hb.tail = append(hb.tail[:0], hb.tail[over:]...)
	}
	return len(p), nil
}
