package persistence

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// Checks of badger's logs — the memtable write-ahead logs (*.mem) and the
// value logs (*.vlog) — run before badger opens a directory
// (inspectBadgerDir) and by Verify.
//
// Badger replays a write-ahead log entry by entry (memtable.go,
// logFile.iterate) and stops at the first entry it cannot read: a short
// read, a key over 64 KiB, a CRC that does not match, an all-zero entry,
// or an entry that does not continue the transaction being replayed. It
// then truncates the file there, keeping nothing after it, and says
// nothing: damage in the middle of a log loses the rest of it silently. It
// does the same with the newest value log (value.go, valueLog.open).
//
// What a crash can leave at the end of a log is narrow. Badger creates a
// log by sizing it (ftruncate: the rest of the file reads as zeros) and
// writes it only through its memory map, one entry at a time from one
// goroutine (an entry, then zeros over the next entry's header), so after
// a SIGKILL the page cache holds every entry written before the one being
// copied, then whatever part of that one the copy had stored (any part:
// Go's memmove stores the head and tail of a large copy last), then zeros.
// A transaction whose last entries were not written yet is dropped whole,
// as it was never acknowledged. So a log is damaged, not torn, when after
// the point where the replay stops there is
//
//   - an intact entry (header, key of a known prefix, value and CRC) at a
//     later offset: written after the one that failed, so the one that
//     failed was complete once; or
//   - for a write-ahead log, anything but zeros further from that point
//     than the largest entry it can hold (keys up to 64 KiB, values below
//     the value threshold); or
//   - an intact entry that breaks the transaction being replayed.
//
// And the newest value log is damaged when a committed write-ahead-log
// entry points into it past where its replay stops (a value is written
// and synced before the entry that points to it).
//
// When none of these is found, the log ends at the entry the replay stopped
// at, and that entry is told apart as torn (accepted, as badger accepts
// it) or damaged (refused): waltail.go, stopDamage — as etcd's WAL does,
// torn only if part of it reads as never written. Value logs other than
// the newest are not replayed; their values are verified when read
// (Verify reads them all).

// Layout constants of badger's logs (badger v4.9.6 value.go, structs.go).
const (
	// logHeaderSize is the header every log starts with: an encryption key
	// id (8 bytes, 0 = none) and an IV (12 bytes).
	logHeaderSize = 20
	// entryMaxHeader is the largest entry header: meta, user meta and three
	// uvarints (key length, value length, expiry).
	entryMaxHeader = 22
	// entryMaxKey is the longest key badger reads back (safeRead.Entry).
	entryMaxKey = 1 << 16
	// Entry meta bits (value.go).
	metaValuePointer = 1 << 1
	metaTxn          = 1 << 6
	metaFinTxn       = 1 << 7
	// metaUnused are meta bits badger never sets.
	metaUnused = 1<<4 | 1<<5
	// valuePointerSize is an encoded value pointer: fid, len, offset as
	// native-endian uint32s (structs.go, valuePointer.Encode).
	valuePointerSize = 12
)

// entryStatus is what reading an entry found.
type entryStatus int

const (
	// entryOK: an intact entry.
	entryOK entryStatus = iota
	// entryEnd: badger's replay stops here without an error (end of file,
	// short read, key too long, CRC mismatch).
	entryEnd
	// entryUndecodable: badger's replay fails here with an error (a header
	// uvarint overflows) or would misread it (lengths overflow: badger
	// panics, seen in TestOpen_DamagedRaftWAL).
	entryUndecodable
	// entryPastEnd: the header claims more bytes than the file holds.
	// Badger stops here (after allocating what the header claims), but a
	// crash cannot leave it: badger sizes a log to hold an entry before it
	// copies the entry in, and a kill leaves a header whole or not at all
	// (it is stored by one or two instructions of a copy, or is zero).
	entryPastEnd
)

// walEntry is one entry read from a log.
type walEntry struct {
	off        int64
	size       int64 // header + key + value + CRC
	meta       byte
	key, value []byte // valid until the next read
}

// entryReader reads entries the way badger's safeRead.Entry does.
type entryReader struct {
	r    *bufio.Reader
	h    hash.Hash32
	off  int64 // offset of the next entry
	size int64 // file size
	buf  []byte
	hlen int
	one  [1]byte
}

// newEntryReader reads the entries of f from off on.
func newEntryReader(f *os.File, off, size int64) *entryReader {
	return &entryReader{
		r:    bufio.NewReaderSize(io.NewSectionReader(f, off, size-off), 1<<20),
		h:    crc32.New(crc32.MakeTable(crc32.Castagnoli)),
		off:  off,
		size: size,
	}
}

// ReadByte reads one header byte into the CRC.
func (er *entryReader) ReadByte() (byte, error) {
	b, err := er.r.ReadByte()
	if err == nil {
		er.one[0] = b
		er.h.Write(er.one[:])
		er.hlen++
	}
	return b, err
}

// next reads the entry at er.off and advances past it when it is intact.
func (er *entryReader) next() (walEntry, entryStatus) {
	e := walEntry{off: er.off}
	er.h.Reset()
	er.hlen = 0
	var err error
	if e.meta, err = er.ReadByte(); err != nil {
		return e, entryEnd
	}
	if _, err = er.ReadByte(); err != nil { // user meta
		return e, entryEnd
	}
	var lens [3]uint64
	for i := range lens {
		if lens[i], err = binary.ReadUvarint(er); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return e, entryEnd
			}
			return e, entryUndecodable
		}
	}
	klen, vlen := uint32(lens[0]), uint32(lens[1]) // badger keeps 32 bits
	if klen > entryMaxKey {
		return e, entryEnd
	}
	kv := uint64(klen) + uint64(vlen)
	if kv > math.MaxUint32 {
		return e, entryUndecodable
	}
	e.size = int64(er.hlen) + int64(kv) + crc32.Size
	if er.off+e.size > er.size {
		if kv > 0 {
			return e, entryPastEnd
		}
		return e, entryEnd // badger's read comes up short
	}
	if uint64(cap(er.buf)) < kv+crc32.Size {
		er.buf = make([]byte, kv+crc32.Size)
	}
	b := er.buf[:kv+crc32.Size]
	if _, err := io.ReadFull(er.r, b); err != nil {
		return e, entryEnd
	}
	er.h.Write(b[:kv])
	if binary.BigEndian.Uint32(b[kv:]) != er.h.Sum32() {
		return e, entryEnd
	}
	e.key, e.value = b[:klen], b[klen:kv]
	er.off += e.size
	return e, entryOK
}

// logScan is what scanLog found in one log.
type logScan struct {
	path string
	fid  uint32
	size int64
	// replayEnd is where badger's replay ends: it keeps what is before and
	// truncates the file there. stop is the offset of the entry the replay
	// stopped at (past replayEnd when it stopped inside a transaction).
	replayEnd, stop int64
	// entries is the number of entries the replay keeps.
	entries int
	// pointsTo is, for a write-ahead log, the end of the furthest value
	// its kept entries point to, by value-log id.
	pointsTo map[uint32]int64
	// damage is nil when the log is sound or only torn at its end.
	damage *DamageError
}

// logKind says which of badger's logs a file is.
type logKind int

const (
	walLog logKind = iota
	valueLog
)

func (k logKind) String() string {
	if k == walLog {
		return "write-ahead log"
	}
	return "value log"
}

// scanLog replays the log at path as badger would, then checks what the
// replay would drop (see the comment at the top of this file). It only
// reads. valueThreshold is the store's badger ValueThreshold (values at
// or above it are in value logs); known reports whether a key (without
// its 8-byte version) is one this package writes.
func scanLog(path string, kind logKind, fid uint32, valueThreshold int64, known func([]byte) bool) (logScan, error) {
	s := logScan{path: path, fid: fid, pointsTo: map[uint32]int64{}}
	f, err := os.Open(path)
	if err != nil {
		return s, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return s, fmt.Errorf("stat %s: %w", path, err)
	}
	s.size = fi.Size()
	bad := func(reason string) { s.damage = &DamageError{Path: path, Reason: kind.String() + " " + reason} }
	if s.size < logHeaderSize {
		bad(fmt.Sprintf("is %d bytes, shorter than badger's %d-byte header (badger sizes a new log before it writes it: a crash cannot leave this)", s.size, logHeaderSize))
		return s, nil
	}
	var hdr [8]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return s, fmt.Errorf("read %s: %w", path, err)
	}
	if id := binary.BigEndian.Uint64(hdr[:]); id != 0 {
		bad(fmt.Sprintf("header names encryption key %d; this store never encrypts", id))
		return s, nil
	}
	status := s.replay(f, kind)
	if status == entryUndecodable {
		bad(fmt.Sprintf("has an entry at byte %d whose header badger cannot decode (it would refuse to open or misread it)", s.stop))
		return s, nil
	}
	if status == entryPastEnd {
		bad(fmt.Sprintf("has an entry at byte %d whose header claims more bytes than the file holds (badger would try to read them; a crash cannot leave this)", s.stop))
		return s, nil
	}
	if status == entryOK { // an intact entry that breaks the transaction
		bad(fmt.Sprintf("has an intact entry at byte %d that does not continue the transaction before it; badger's replay would stop there and drop "+
			"the rest of the file (a crash cannot leave this)", s.stop))
		return s, nil
	}
	reach := int64(-1)
	if kind == walLog {
		reach = s.stop + 2*entryMaxHeader + entryMaxKey + valueThreshold + crc32.Size
	}
	t, err := scanTail(f, s.stop+1, s.size, reach, known)
	if err != nil {
		return s, fmt.Errorf("read %s: %w", path, err)
	}
	switch {
	case t.intactAt >= 0:
		bad(fmt.Sprintf("damaged at byte %d: the entry there cannot be read, yet an intact entry follows at byte %d (%d intact entries, %s, from there); "+
			"badger's replay would stop at the damage and silently drop everything after it (a crash leaves only a torn last entry followed by zeros)",
			s.stop, t.intactAt, t.intactEntries, byteSize(t.intactBytes)))
	case t.dataBeyond >= 0:
		bad(fmt.Sprintf("damaged at byte %d: the entry there cannot be read, and the file holds data again at byte %d, further than any one entry reaches; "+
			"badger's replay would stop at the damage and silently drop everything after it (a crash leaves only a torn last entry followed by zeros)",
			s.stop, t.dataBeyond))
	default:
		why, err := stopDamage(f, s.stop, s.size, known)
		if err != nil {
			return s, fmt.Errorf("read %s: %w", path, err)
		}
		if why != "" {
			bad(why)
		}
	}
	return s, nil
}

// replay runs badger's replay loop (logFile.iterate) over f and records
// where it ends. It returns entryEnd when the loop ended on an entry it
// could not read (or the end of the file), entryUndecodable when badger
// would fail, and entryOK when it ended on an intact entry that does not
// fit the transaction being replayed.
func (s *logScan) replay(f *os.File, kind logKind) entryStatus {
	er := newEntryReader(f, logHeaderSize, s.size)
	s.replayEnd = logHeaderSize
	var lastCommit uint64
	type pointer struct {
		fid uint32
		end int64
	}
	var pending []pointer // pointers of the open transaction
	pendingN := 0
	keep := func(e walEntry) {
		if kind == walLog && e.meta&metaValuePointer != 0 && len(e.value) == valuePointerSize {
			fid := binary.NativeEndian.Uint32(e.value[0:])
			end := int64(binary.NativeEndian.Uint32(e.value[4:])) + int64(binary.NativeEndian.Uint32(e.value[8:]))
			pending = append(pending, pointer{fid, end})
		}
		pendingN++
	}
	commit := func(end int64) {
		for _, p := range pending {
			s.pointsTo[p.fid] = max(s.pointsTo[p.fid], p.end)
		}
		s.entries += pendingN
		pending, pendingN = pending[:0], 0
		s.replayEnd = end
	}
	for {
		s.stop = er.off
		e, status := er.next()
		if status != entryOK {
			return status
		}
		if len(e.key) == 0 { // badger: e.isZero()
			return entryEnd
		}
		switch {
		case e.meta&metaTxn != 0:
			ts := parseTs(e.key)
			if lastCommit == 0 {
				lastCommit = ts
			}
			if lastCommit != ts {
				return entryOK
			}
			keep(e)
		case e.meta&metaFinTxn != 0:
			ts, err := strconv.ParseUint(string(e.value), 10, 64)
			if err != nil || ts != lastCommit {
				return entryOK
			}
			lastCommit = 0
			commit(er.off)
		default:
			if lastCommit != 0 {
				return entryOK
			}
			keep(e)
			commit(er.off)
		}
	}
}

// parseTs is badger's y.ParseTs: the version in a key's last 8 bytes.
func parseTs(key []byte) uint64 {
	if len(key) <= 8 {
		return 0
	}
	return math.MaxUint64 - binary.BigEndian.Uint64(key[len(key)-8:])
}

// byteSize renders a byte count for a message.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// knownKeyStart reports whether key (without its version) starts with a
// prefix this package writes (keys.go) or one badger writes itself
// (its transaction markers, "!badger!").
func knownKeyStart(key []byte) bool {
	for _, p := range []string{prefixMeta, prefixEnt, prefixEv, prefixIndex, prefixAudit, prefixRaftLog, prefixRaftStable, "!badger!"} {
		if bytes.HasPrefix(key, []byte(p)) {
			return true
		}
	}
	return false
}

// scanStoreLogs scans the write-ahead logs among names (the *.mem and
// *.vlog files of dir, with their sizes) and the newest value log (the one
// badger replays), skipping zero-length ones (removeEmptyLogs removes
// them), and returns the damage found, in file-name order, and where
// badger's replay of each log scanned ends. An error means a log could not
// be read.
func scanStoreLogs(dir string, names []string, sizes map[string]int64, opts badger.Options) ([]*DamageError, map[string]int64, error) {
	var damage []*DamageError
	replayEnd := map[string]int64{}
	pointsTo := map[uint32]int64{}
	var newestVlog string
	var newestFid uint32
	for _, name := range names {
		if sizes[name] == 0 {
			continue
		}
		var kind logKind
		var fid uint64
		var err error
		switch {
		case strings.HasSuffix(name, ".mem"):
			kind = walLog
			fid, err = strconv.ParseUint(strings.TrimSuffix(name, ".mem"), 10, 32)
		case strings.HasSuffix(name, ".vlog"):
			fid, err = strconv.ParseUint(strings.TrimSuffix(name, ".vlog"), 10, 32)
			if err == nil && (newestVlog == "" || uint32(fid) > newestFid) {
				newestVlog, newestFid = name, uint32(fid)
			}
			continue
		default:
			continue
		}
		if err != nil {
			continue // badger refuses the name itself
		}
		s, err := scanLog(filepath.Join(dir, name), kind, uint32(fid), opts.ValueThreshold, knownKeyStart)
		if err != nil {
			return nil, nil, err
		}
		replayEnd[name] = s.replayEnd
		if s.damage != nil {
			damage = append(damage, s.damage)
		}
		for id, end := range s.pointsTo {
			pointsTo[id] = max(pointsTo[id], end)
		}
	}
	if newestVlog == "" {
		return damage, replayEnd, nil
	}
	path := filepath.Join(dir, newestVlog)
	s, err := scanLog(path, valueLog, newestFid, opts.ValueThreshold, knownKeyStart)
	if err != nil {
		return nil, nil, err
	}
	replayEnd[newestVlog] = s.replayEnd
	switch {
	case s.damage != nil:
		damage = append(damage, s.damage)
	case pointsTo[newestFid] > s.replayEnd:
		damage = append(damage, &DamageError{Path: path, Reason: fmt.Sprintf("value log damaged at byte %d: badger's replay would stop there and truncate it, "+
			"but committed write-ahead-log entries point to values up to byte %d (a value is written before the entry that points to it, so a crash cannot leave this)",
			s.stop, pointsTo[newestFid])})
	}
	return damage, replayEnd, nil
}
