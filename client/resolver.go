package client

import (
	"google.golang.org/grpc/resolver"
)

// resolverScheme is the target scheme of the per-connection static resolver.
// The builder is passed with grpc.WithResolvers, so nothing is registered
// globally.
const resolverScheme = "norsk-manager"

// staticResolver resolves every target to a fixed list of manager addresses,
// one endpoint each, so that the round_robin balancer keeps a sub-channel per
// manager and skips the unreachable ones. Build may be called again when the
// channel leaves idle mode; each call reports the same list.
type staticResolver struct {
	addrs []string
}

var (
	_ resolver.Builder  = (*staticResolver)(nil)
	_ resolver.Resolver = (*builtResolver)(nil)
)

// Build reports the address list to cc and returns a resolver that reports
// it again on ResolveNow.
func (r *staticResolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	b := &builtResolver{cc: cc, state: r.state()}
	b.ResolveNow(resolver.ResolveNowOptions{})
	return b, nil
}

// Scheme returns resolverScheme.
func (r *staticResolver) Scheme() string { return resolverScheme }

// state is the resolver.State listing every address as its own endpoint.
func (r *staticResolver) state() resolver.State {
	st := resolver.State{}
	for _, a := range r.addrs {
		// ServerName is the authority of the address's connection: with
		// TLS, its host is the name the manager's certificate is checked
		// against (the channel's own authority, "manager", names none).
		addr := resolver.Address{Addr: a, ServerName: a}
		st.Addresses = append(st.Addresses, addr)
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{addr}})
	}
	return st
}

// builtResolver is the resolver of one channel.
type builtResolver struct {
	cc    resolver.ClientConn
	state resolver.State
}

// ResolveNow re-reports the fixed list; the channel calls it after a
// connection failure.
func (b *builtResolver) ResolveNow(resolver.ResolveNowOptions) {
	// The error only says the balancer rejected the update; with a fixed
	// non-empty list there is nothing better to report.
	_ = b.cc.UpdateState(b.state)
}

// Close does nothing: the resolver holds no resources.
func (b *builtResolver) Close() {}
