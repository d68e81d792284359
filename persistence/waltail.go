package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// What a log holds from the point where badger's replay of it stops (see
// the comment at the top of walscan.go): an intact entry further on, data
// beyond an entry's reach (scanTail), or, when there is neither, the entry
// the replay stopped at, told apart as torn or damaged (stopDamage).

// tailScan is what scanTail found after the point a replay stopped.
type tailScan struct {
	// intactAt is the offset of the first intact entry found, -1 if none;
	// intactEntries and intactBytes count the intact run from there.
	intactAt      int64
	intactEntries int
	intactBytes   int64
	// dataBeyond is the first non-zero byte at or beyond reach, -1 if none.
	dataBeyond int64
}

// tailChunk is how much of a log's tail scanTail reads at a time.
const tailChunk = 1 << 20

// scanTail looks at f's bytes from `from` to size for an intact entry
// starting at any offset, and (reach >= 0) for a non-zero byte at or
// beyond reach. Holes in the file (the unwritten rest of a log is sparse)
// are skipped without reading.
func scanTail(f *os.File, from, size, reach int64, known func([]byte) bool) (tailScan, error) {
	t := tailScan{intactAt: -1, dataBeyond: -1}
	buf := make([]byte, tailChunk+entryMaxHeader+8)
	crcBuf := make([]byte, 64<<10)
	for off := from; off < size; {
		data, end, err := nextData(f, off, size)
		if err != nil {
			return t, err
		}
		if data >= size {
			break
		}
		for pos := data; pos < end; pos += tailChunk {
			n := min(int64(len(buf)), size-pos)
			b := buf[:n]
			if _, err := f.ReadAt(b, pos); err != nil && !errors.Is(err, io.EOF) {
				return t, err
			}
			scan := min(int64(tailChunk), end-pos) // candidates in this chunk
			for i := int64(0); i < scan; i++ {
				if i+2 >= n || b[i+2] == 0 || b[i]&metaUnused != 0 {
					continue // no key length, or not a meta badger writes
				}
				sz, ok := candidate(b[i:], size-(pos+i), known)
				if !ok {
					continue
				}
				intact, err := entryCRCMatches(f, pos+i, sz, crcBuf)
				if err != nil {
					return t, err
				}
				if !intact {
					continue
				}
				t.intactAt = pos + i
				t.intactEntries, t.intactBytes = countIntact(f, t.intactAt, size)
				return t, nil
			}
			if reach >= 0 && pos+scan > reach {
				lo := max(reach-pos, 0)
				if i := firstNonZero(b[lo:scan]); i >= 0 {
					t.dataBeyond = pos + lo + int64(i)
					return t, nil
				}
			}
		}
		off = end
	}
	return t, nil
}

// entryCRCMatches reports whether the sz-byte entry at off in f ends with
// the CRC of the rest, reading it through buf.
func entryCRCMatches(f *os.File, off, sz int64, buf []byte) (bool, error) {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	body := sz - crc32.Size
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, off, body), buf); err != nil {
		return false, err
	}
	var sum [crc32.Size]byte
	if _, err := f.ReadAt(sum[:], off+body); err != nil {
		return false, err
	}
	return binary.BigEndian.Uint32(sum[:]) == h.Sum32(), nil
}

// nextData returns the data region of f at or after off: its start and
// end (a hole or size). Without hole support (or past the last data) it
// returns (off, size) or (size, size).
func nextData(f *os.File, off, size int64) (int64, int64, error) {
	fd := int(f.Fd())
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return size, size, nil
	case err != nil:
		return off, size, nil // no SEEK_DATA here: read it all
	}
	hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil || hole > size {
		hole = size
	}
	return data, hole, nil
}

// candidate decodes an entry header at the start of b and reports the
// entry's size if it could be an intact entry: a key of 9 bytes to 64 KiB
// (a key and its 8-byte version) whose start is known, inside the
// remaining bytes of the file.
func candidate(b []byte, remaining int64, known func([]byte) bool) (int64, bool) {
	p := 2
	var lens [3]uint64
	for j := range lens {
		v, n := binary.Uvarint(b[min(p, len(b)):])
		if n <= 0 {
			return 0, false
		}
		lens[j], p = v, p+n
	}
	klen, vlen := lens[0], lens[1]
	if klen < 9 || klen > entryMaxKey || vlen > math.MaxUint32 {
		return 0, false
	}
	sz := int64(p) + int64(klen) + int64(vlen) + crc32.Size
	if sz > remaining {
		return 0, false
	}
	keyStart := b[min(p, len(b)):min(p+int(klen)-8, len(b))]
	if !known(keyStart) {
		return 0, false
	}
	return sz, true
}

// countIntact counts the intact entries from off on and their bytes.
func countIntact(f *os.File, off, size int64) (int, int64) {
	er := newEntryReader(f, off, size)
	n := 0
	for {
		e, status := er.next()
		if status != entryOK || len(e.key) == 0 {
			return n, er.off - off
		}
		n++
	}
}

// firstNonZero returns the index of b's first non-zero byte, -1 if none.
func firstNonZero(b []byte) int {
	var zeros [4096]byte
	for i := 0; i < len(b); i += len(zeros) {
		c := b[i:min(i+len(zeros), len(b))]
		if bytes.Equal(c, zeros[:len(c)]) {
			continue
		}
		for j, v := range c {
			if v != 0 {
				return i + j
			}
		}
	}
	return -1
}

// Telling a torn last entry from a damaged one (issue 21 §7). The replay
// stopped at an entry it could not read and nothing after it says damage:
// the log ends there with an entry whose checksum fails. A write cut short
// leaves that, and so does a bit flipped in a complete entry; badger drops
// both, and the second may be an acknowledged write. As etcd's WAL does
// (wal/decoder.go, isTornEntry), the entry is taken for torn only if part
// of it reads as never written, zeros where a cut-short write stops:
//
//   - a kill (the manager's crash model, test/storecrash): badger writes an
//     entry with one copy into its memory-mapped log (memtable.go
//     writeEntry, value.go write), and the page cache keeps every store
//     the copy made before the kill. Every path of Go's memmove (amd64 and
//     arm64, runtime/memmove_*.s) stores the last bytes of a copy with its
//     final instruction, so a cut-short copy leaves the entry's last byte
//     as the file had it, zero (a log is created by sizing it, and badger
//     truncates a log where its replay stops);
//   - a power cut: disks write 512-byte sectors whole, so an unwritten part
//     of the entry is all its bytes in some sector (etcd's rule: the entry
//     split at sector boundaries of the file, any part all zeros).
//
// An entry whose last byte and every sector part hold data was written
// whole: a checksum that fails then is damage. Both rules need the entry's
// extent from its header, and a kill can leave the header itself unwritten
// (memmove's large-copy path on amd64 stores the first up to 32 bytes
// after the middle, then the last 128): a header that does not give an
// entry this package writes (a key of a version and a known start, inside
// the file) is taken for torn. And, before either rule,
// a checksum that one flipped bit explains exactly, the bit in a byte that
// holds data (a cut-short write leaves whole bytes zero), is damage however
// the entry ends: found by the checksum's linearity for a bit that leaves
// the entry's length as it is, and by trying each bit of the header for one
// that changes it (also when the header is not one this package writes);
// the corrected entry must have a key this package writes.
// A cut-short write matches such a correction by chance only (2^-32 per
// bit tried).

// sectorSize is the unit a disk writes whole (etcd's minSectorSize).
const sectorSize = 512

// maxBitSearch bounds the entries searched for one flipped bit: every
// write-ahead-log entry (keys up to 64 KiB, values under the 1 MiB value
// threshold) and most values in a value log.
const maxBitSearch = 4 << 20

// castagnoli is the CRC table of badger's entries.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryHeader is a decoded entry header.
type entryHeader struct {
	hlen       int
	klen, vlen uint32
}

// size is the entry's size: header, key, value and CRC.
func (h entryHeader) size() int64 { return int64(h.hlen) + int64(h.klen) + int64(h.vlen) + crc32.Size }

// decodeHeader decodes the entry header at the start of b as badger does
// (lengths kept to 32 bits); ok is false if b ends inside it or a length
// overflows.
func decodeHeader(b []byte) (h entryHeader, ok bool) {
	p := 2
	var lens [3]uint64
	for i := range lens {
		if p >= len(b) {
			return h, false
		}
		v, n := binary.Uvarint(b[p:])
		if n <= 0 {
			return h, false
		}
		lens[i], p = v, p+n
	}
	return entryHeader{hlen: p, klen: uint32(lens[0]), vlen: uint32(lens[1])}, true
}

// stopDamage returns why the entry at stop in f (size bytes), where the
// log's replay stopped, is damage rather than a torn write, or "" when it
// may be torn (or there is no entry there: the log ends, or the header is
// one the replay refuses on its own).
func stopDamage(f *os.File, stop, size int64, known func([]byte) bool) (string, error) {
	hb := make([]byte, min(entryMaxHeader, size-stop))
	if _, err := f.ReadAt(hb, stop); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	h, ok := decodeHeader(hb)
	if !ok {
		return "", nil
	}
	if h.klen > entryMaxKey {
		return fmt.Sprintf("damaged at byte %d: the entry there has a key of %d bytes, longer than the 64 KiB badger writes (a write cut short leaves zeros, "+
			"which cannot lengthen a key); badger's replay would stop there and silently drop it", stop, h.klen), nil
	}
	flipped := func(p, bit int, sz int64) string {
		return fmt.Sprintf("damaged at byte %d, in the last entry (%d bytes at byte %d): bit %d of byte %d differs from what the entry's checksum "+
			"says, and a write cut short leaves whole bytes zero, never a bit wrong in a byte it wrote; badger's replay would stop there and "+
			"silently drop that entry and the transaction it ends, which may have been acknowledged", stop+int64(p), sz, stop, bit, stop+int64(p))
	}
	sz := h.size()
	var e []byte // the entry, if its header gives one to search
	if h.klen >= 9 && stop+sz <= size && sz <= maxBitSearch {
		e = make([]byte, sz)
		if _, err := f.ReadAt(e, stop); err != nil {
			return "", err
		}
		if crcOK(e) {
			return "", nil // intact: the replay stopped for another reason
		}
	}
	p, bit, g, err := headerFlip(f, stop, size, h, hb, known)
	if err != nil {
		return "", err
	}
	if p < 0 && e != nil {
		p, bit, g = bodyFlip(e, h, known)
	}
	if p >= 0 {
		return flipped(p, bit, g.size()), nil
	}
	plausible, err := plausibleEntry(f, stop, size, h, known)
	switch {
	case err != nil || !plausible:
		// The header does not give an entry this package writes: a head
		// the copy had not stored yet reads as zeros (Go's memmove on
		// amd64 stores the first up to 32 bytes of a large copy after its
		// middle), or the header or key is damaged beyond one bit.
		return "", err
	case e != nil:
		if e[sz-1] == 0 || zeroSectorPart(e, stop) {
			return "", nil
		}
	default:
		torn, err := tornOnDisk(f, stop, sz)
		if err != nil || torn {
			return "", err
		}
	}
	return fmt.Sprintf("damaged at byte %d: the last entry there (%d bytes) fails its checksum, yet all of it was written — its last byte, which a copy "+
		"cut short by a kill leaves zero, and its part of every 512-byte sector it spans hold data (a torn write leaves zeros); badger's replay "+
		"would stop there and silently drop that entry and the transaction it ends, which may have been acknowledged", stop, sz), nil
}

// plausibleEntry reports whether the header h at stop gives an entry this
// package could have written: inside the file, a key of a version and at
// least one byte, whose start is known.
func plausibleEntry(f *os.File, stop, size int64, h entryHeader, known func([]byte) bool) (bool, error) {
	if h.klen < 9 || stop+h.size() > size {
		return false, nil
	}
	k := make([]byte, min(int(h.klen)-8, 64))
	if _, err := f.ReadAt(k, stop+int64(h.hlen)); err != nil {
		return false, err
	}
	return known(k), nil
}

// crcOK reports whether the entry e ends with the CRC of the rest.
func crcOK(e []byte) bool {
	n := len(e) - crc32.Size
	return crc32.Checksum(e[:n], castagnoli) == binary.BigEndian.Uint32(e[n:])
}

// headerFlip looks for one flipped bit of the header (h as decoded from
// hb, the bytes at stop in f) that changes the entry's lengths and makes
// it intact, with a known key: it returns the bit's byte offset in the
// entry, the bit and the corrected header, or -1. Only a bit in a
// non-zero byte counts.
func headerFlip(f *os.File, stop, size int64, h entryHeader, hb []byte, known func([]byte) bool) (int, int, entryHeader, error) {
	for p := 0; p < h.hlen; p++ {
		if hb[p] == 0 {
			continue
		}
		for bit := range 8 {
			hb[p] ^= 1 << bit
			g, ok := decodeHeader(hb)
			hb[p] ^= 1 << bit
			if !ok || g == h || g.klen < 9 || g.klen > entryMaxKey || g.size() > maxBitSearch || stop+g.size() > size {
				continue
			}
			c := make([]byte, g.size())
			if _, err := f.ReadAt(c, stop); err != nil {
				return -1, 0, g, err
			}
			c[p] ^= 1 << bit
			if crcOK(c) && known(c[g.hlen:g.hlen+int(g.klen)-8]) {
				return p, bit, g, nil
			}
		}
	}
	return -1, 0, h, nil
}

// bodyFlip looks for one flipped bit that leaves the lengths of the
// entry e (header h) and explains its failed CRC: the CRC is linear, so
// the flip of bit b of byte p changes it by the CRC (zero start, no final
// xor) of that bit followed by the rest of the entry as zeros. It returns
// the bit's byte offset, the bit and h, or -1. Only a bit in a non-zero
// byte counts, and the corrected entry must have a known key.
func bodyFlip(e []byte, h entryHeader, known func([]byte) bool) (int, int, entryHeader) {
	n := len(e) - crc32.Size
	syn := crc32.Checksum(e[:n], castagnoli) ^ binary.BigEndian.Uint32(e[n:])
	check := func(p, bit int) bool {
		if e[p] == 0 {
			return false
		}
		e[p] ^= 1 << bit
		defer func() { e[p] ^= 1 << bit }()
		g, ok := decodeHeader(e[:min(len(e), entryMaxHeader)])
		return ok && g == h && known(e[h.hlen:h.hlen+int(h.klen)-8])
	}
	if syn&(syn-1) == 0 { // one bit of the stored CRC (big-endian)
		k := 0
		for syn>>k != 1 {
			k++
		}
		if p, bit := n+3-k/8, k%8; check(p, bit) {
			return p, bit, h
		}
	}
	var v [8]uint32
	for bit := range v {
		v[bit] = castagnoli[1<<bit]
	}
	for p := n - 1; p >= 0; p-- {
		for bit := range v {
			if v[bit] == syn && check(p, bit) {
				return p, bit, h
			}
			v[bit] = castagnoli[byte(v[bit])] ^ v[bit]>>8
		}
	}
	return -1, 0, h
}

// zeroSectorPart reports whether the part of the entry e (at file offset
// off) in some 512-byte sector of the file is all zeros.
func zeroSectorPart(e []byte, off int64) bool {
	for i := 0; i < len(e); {
		n := min(int(sectorSize-(off+int64(i))%sectorSize), len(e)-i)
		if firstNonZero(e[i:i+n]) < 0 {
			return true
		}
		i += n
	}
	return false
}

// tornOnDisk applies the torn-write rules to an entry too large to hold
// in memory: its last byte zero, or a zero sector part.
func tornOnDisk(f *os.File, off, sz int64) (bool, error) {
	buf := make([]byte, tailChunk)
	for pos := off; pos < off+sz; {
		// Read whole sectors after the first part, so that parts never
		// straddle two reads.
		n := min(int64(len(buf)), off+sz-pos)
		if end := pos + n; end < off+sz {
			n -= end % sectorSize
		}
		b := buf[:n]
		if _, err := f.ReadAt(b, pos); err != nil {
			return false, err
		}
		if zeroSectorPart(b, pos) || pos+n == off+sz && b[n-1] == 0 {
			return true, nil
		}
		pos += n
	}
	return false, nil
}
