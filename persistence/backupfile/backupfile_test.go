package backupfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

func testFile(t *testing.T, m Meta, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != int64(buf.Len()) {
		t.Fatalf("Size %d, wrote %d", w.Size(), buf.Len())
	}
	return buf.Bytes()
}

func TestVerify_RoundTrip(t *testing.T) {
	m := Meta{StoreID: "abc", StoreFormat: 1, Mode: "cluster", AppliedIndex: 42, EventHead: 7, Keys: 3,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ManagerVersion: "v1"}
	for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("snapshot"), 100_000)} {
		f := testFile(t, m, body)
		got, size, err := Verify(bytes.NewReader(f))
		if err != nil {
			t.Fatalf("body of %d bytes: %v", len(body), err)
		}
		if got != m || size != int64(len(f)) {
			t.Errorf("got %+v, %d; want %+v, %d", got, size, m, len(f))
		}
		hm, n, err := ReadHeader(bytes.NewReader(f))
		if err != nil || hm != m || n != len(f)-len(body)-ChecksumLen {
			t.Errorf("ReadHeader = %+v, %d, %v", hm, n, err)
		}
	}
}

func TestVerify_RefusesBad(t *testing.T) {
	good := testFile(t, Meta{AppliedIndex: 1}, []byte("the snapshot stream"))
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name string
		file []byte
		want error
		text string
	}{
		{"empty", nil, ErrTruncated, "inside its header"},
		{"short header", good[:12], ErrTruncated, "inside its header"},
		{"short metadata", good[:20], ErrTruncated, "inside its metadata"},
		{"no checksum", good[:len(good)-ChecksumLen-5], ErrTruncated, "before a checksum"},
		{"checksum cut in half", good[:len(good)-ChecksumLen/2], ErrChecksum, "does not match"},
		{"cut checksum", good[:len(good)-1], ErrChecksum, "does not match"},
		{"flipped body bit", mod(func(b []byte) { b[len(b)-ChecksumLen-2] ^= 1 }), ErrChecksum, "does not match"},
		{"appended byte", append(bytes.Clone(good), 'x'), ErrChecksum, "does not match"},
		{"bad magic", mod(func(b []byte) { b[1] = 'X' }), ErrNotBackup, "not \"NMBACKUP\""},
		{"other version", mod(func(b []byte) { binary.BigEndian.PutUint32(b[8:], 7) }), ErrVersion, "version 7, this build reads 1"},
		{"huge metadata", mod(func(b []byte) { binary.BigEndian.PutUint32(b[12:], MaxMetaLen+1) }), ErrMeta, "exceeds"},
		{"metadata not JSON", mod(func(b []byte) { b[16] = '[' }), ErrMeta, "not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Verify(bytes.NewReader(tc.file))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Verify = %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
}

func TestEncodeHeader_MetaTooLarge(t *testing.T) {
	if _, err := EncodeHeader(Meta{StoreID: strings.Repeat("x", MaxMetaLen)}); err == nil {
		t.Fatal("want an error for metadata over MaxMetaLen")
	}
}
