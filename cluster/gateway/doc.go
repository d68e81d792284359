// Package gateway implements the public gRPC API (norsk.api.manager.Manager)
// on top of the grains: it validates each request (InvalidArgument naming
// the field and the reason, before anything changes), turns it into a grain
// command with a fresh request id, routes it through actors.Router and maps
// the answer to a gRPC status in one place (errors.go). Reads that span
// entities — JobSearch, ListNodes, ListClusterNodes, JobById, GetBundle,
// ListBundles and the event stream — are served from the local store, which
// every acknowledged write has reached before it was acknowledged.
//
// The gateway holds no state of its own beyond event-stream subscriptions.
package gateway
