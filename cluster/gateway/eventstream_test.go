package gateway

import (
	"math"
	"testing"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// TestLag: the events a subscriber is behind the head saturate at 0 when
// its cursor is at or past the head (issue 10 §2: a cursor one past a
// cached head wrapped to 18446744073709551615 and cut the stream off).
func TestLag(t *testing.T) {
	const maxLag = 10_000
	cases := []struct {
		name         string
		head, cursor persistence.Index
		want         uint64
		cutOff       bool
	}{
		{"at the head", 42, 42, 0, false},
		{"one past the head", 42, 43, 0, false},
		{"far past the head", 0, math.MaxUint64, 0, false},
		{"one behind", 43, 42, 1, false},
		{"exactly the limit", maxLag + 5, 5, maxLag, false},
		{"one over the limit", maxLag + 6, 5, maxLag + 1, true},
		{"whole range", math.MaxUint64, 0, math.MaxUint64, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := lag(tc.head, tc.cursor)
			if got != tc.want {
				t.Fatalf("lag(%d, %d) = %d, want %d", tc.head, tc.cursor, got, tc.want)
			}
			if cut := got > maxLag; cut != tc.cutOff {
				t.Fatalf("lag(%d, %d) = %d: cut off %v, want %v", tc.head, tc.cursor, got, cut, tc.cutOff)
			}
		})
	}
}
