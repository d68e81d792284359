// Package identity carries who is calling the manager's API through a
// request's context: the ACL layer (issue 12 §2) puts the caller there
// once it has authenticated the request, and whatever records or limits by
// caller (the audit log, per-token stream limits) reads it back. It holds
// no secrets: a token's secret never enters a context.
package identity

import "context"

// Caller is an authenticated caller of the API.
type Caller struct {
	// Name is the token's name as its creator gave it ("ci-deploy"), or
	// "anonymous" when ACLs are off. Audit entries record it as "who".
	Name string
	// TokenID is the token's public accessor id (never its secret); ""
	// when ACLs are off.
	TokenID string
	// Role is the token's role ("management", "operator", "read", or a
	// narrow role); "" when ACLs are off.
	Role string
	// Peer is the remote address of the connection ("127.0.0.1:53122"),
	// and, with mutual TLS, "cn=<subject common name>" after a space.
	Peer string
}

// Anonymous is the caller when ACLs are off.
const Anonymous = "anonymous"

type ctxKey struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the caller ctx carries; ok is false when none was set (a
// call from inside the manager, or a server without the identity
// interceptor).
func From(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

// NameOf returns the caller's name for records: the name ctx carries, or
// Anonymous when none.
func NameOf(ctx context.Context) string {
	if c, ok := From(ctx); ok && c.Name != "" {
		return c.Name
	}
	return Anonymous
}
