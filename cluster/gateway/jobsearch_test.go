package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSearchSlots: a caller gets at most perCaller slots and all callers
// together total; a slot given back (once, however often release is
// called) can be taken again.
func TestSearchSlots(t *testing.T) {
	c := newSearchSlots(2, 3)
	r1, err := c.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire("a"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third of one caller: %v, want ResourceExhausted", err)
	}
	if _, err := c.acquire("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire("c"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the total: %v, want ResourceExhausted", err)
	}
	r1()
	r1()
	if n := c.running(); n != 2 {
		t.Fatalf("running %d after one release (called twice), want 2", n)
	}
	if _, err := c.acquire("c"); err != nil {
		t.Fatal(err)
	}
	unlimited := newSearchSlots(-1, -1)
	for range 100 {
		if _, err := unlimited.acquire("a"); err != nil {
			t.Fatal(err)
		}
	}
}
