package auditchain

import (
	"errors"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"google.golang.org/protobuf/proto"
)

// chain builds n chained entries starting at seq 1.
func chain(n int) []*managerpb.AuditLogEntry {
	var out []*managerpb.AuditLogEntry
	prev := ""
	for i := 1; i <= n; i++ {
		e := &managerpb.AuditLogEntry{Seq: int64(i), TimestampMs: float64(1700000000000 + i), Source: SourceManager,
			Kind: "job.create", Who: "anonymous", Payload: `{"job_id":"j"}`, PrevHash: prev}
		e.Hash = Hash(e)
		prev = e.Hash
		out = append(out, e)
	}
	return out
}

// TestCanonical_KnownVector pins the encoding: an outside verifier
// following docs/design/audit.md must get this hash.
func TestCanonical_KnownVector(t *testing.T) {
	e := &managerpb.AuditLogEntry{Seq: 1, TimestampMs: 1700000000000, Source: "manager", Kind: "job.create",
		Who: "anonymous", Payload: `{"job_id":"a"}`}
	c := Canonical(e)
	if !strings.HasPrefix(string(c), "norsk-audit-v1\x00\x00\x00\x00\x00\x00\x00\x01") {
		t.Fatalf("canonical encoding starts %q", c[:22])
	}
	if want := 14 + 16 + 5*4 + len("manager") + len("job.create") + len("anonymous") + len(`{"job_id":"a"}`); len(c) != want {
		t.Fatalf("canonical encoding is %d bytes, want %d", len(c), want)
	}
	// Computed independently (Python's hashlib over the documented
	// encoding), so a change of the encoding cannot pass unnoticed.
	const want = "9d7a932682a0eea2372be668a9e2f294a504088b981d79cf110da8d69e81f82d"
	if h := Hash(e); h != want {
		t.Fatalf("hash %s, want %s", h, want)
	}
}

// TestCanonical_FieldsSeparated: moving bytes between adjacent fields
// changes the hash (the length prefixes make the encoding unambiguous).
func TestCanonical_FieldsSeparated(t *testing.T) {
	a := &managerpb.AuditLogEntry{Seq: 1, Source: "ab", Kind: "c"}
	b := &managerpb.AuditLogEntry{Seq: 1, Source: "a", Kind: "bc"}
	if Hash(a) == Hash(b) {
		t.Fatal("source/kind boundary does not change the hash")
	}
}

func TestVerifier_Next(t *testing.T) {
	anchorOf := func(e *managerpb.AuditLogEntry) *managerpb.AuditLogEntry {
		return &managerpb.AuditLogEntry{Seq: e.Seq, TimestampMs: e.TimestampMs, Source: SourceManager, Kind: KindAnchor, Hash: e.Hash}
	}
	cases := []struct {
		name    string
		entries func() []*managerpb.AuditLogEntry
		badSeq  int64 // 0: the chain verifies
		reason  string
	}{
		{"sound", func() []*managerpb.AuditLogEntry { return chain(5) }, 0, ""},
		{"empty", func() []*managerpb.AuditLogEntry { return nil }, 0, ""},
		{"payload changed", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			c[2].Payload = `{"job_id":"k"}`
			return c
		}, 3, "was changed"},
		{"who changed", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			c[3].Who = "mallory"
			return c
		}, 4, "was changed"},
		{"timestamp changed", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			c[0].TimestampMs++
			return c
		}, 1, "was changed"},
		{"entry rehashed after a change", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			c[1].Kind = "job.delete"
			c[1].Hash = Hash(c[1])
			return c
		}, 3, "prev_hash"},
		{"entry removed", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			return append(c[:2], c[3:]...)
		}, 3, "missing"},
		{"oldest removed, no anchor", func() []*managerpb.AuditLogEntry { return chain(5)[2:] }, 3, "without an anchor"},
		{"anchored", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			return append([]*managerpb.AuditLogEntry{anchorOf(c[1])}, c[2:]...)
		}, 0, ""},
		{"anchor with a wrong hash", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			a := anchorOf(c[1])
			a.Hash = c[0].Hash
			return append([]*managerpb.AuditLogEntry{a}, c[2:]...)
		}, 3, "prev_hash"},
		{"anchor in the middle", func() []*managerpb.AuditLogEntry {
			c := chain(5)
			c[2] = anchorOf(c[2])
			return c
		}, 3, "middle"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v Verifier
			var err error
			for _, e := range tc.entries() {
				if err = v.Next(proto.Clone(e).(*managerpb.AuditLogEntry)); err != nil {
					break
				}
			}
			if tc.badSeq == 0 {
				if err != nil {
					t.Fatalf("sound chain refused: %v", err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a MismatchError at %d", err, tc.badSeq)
			}
			if me.Seq != tc.badSeq || !strings.Contains(me.Reason, tc.reason) {
				t.Fatalf("got %v, want entry %d: …%s…", err, tc.badSeq, tc.reason)
			}
		})
	}
}
