package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
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
