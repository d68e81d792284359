package identity

import (
	"context"
	"testing"
)

func TestWithFrom(t *testing.T) {
	ctx := context.Background()
	if _, ok := From(ctx); ok {
		t.Fatal("From of a bare context: ok")
	}
	if got := NameOf(ctx); got != Anonymous {
		t.Fatalf("NameOf bare = %q, want %q", got, Anonymous)
	}
	ctx = With(ctx, Caller{Name: "ci", TokenID: "t1", Role: "operator", Peer: "127.0.0.1:1"})
	c, ok := From(ctx)
	if !ok || c.Name != "ci" || c.Role != "operator" {
		t.Fatalf("From = %+v, %v", c, ok)
	}
	if got := NameOf(ctx); got != "ci" {
		t.Fatalf("NameOf = %q, want ci", got)
	}
}
