package agent

import (
	"google.golang.org/grpc"
)

// API server limits (docs/design/security.md, "Limits").
const (
	// DefaultMaxRecvMsgSize bounds one request in bytes: a job or a bundle
	// is at most 1 MiB encoded (the gateway's validation), so 4 MiB —
	// gRPC's own default — leaves room and no more.
	DefaultMaxRecvMsgSize = 4 << 20
	// DefaultMaxSendMsgSize bounds one response in bytes. Listings are
	// paged below it and below a default client's 4 MiB receive limit
	// (the gateway's paging.go). gRPC's own default is 2 GiB.
	DefaultMaxSendMsgSize = 16 << 20
	// DefaultMaxConcurrentStreams bounds the calls one client connection
	// may have in flight at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
	// A client at the limit queues further calls until one ends; a
	// manager's internal client of another manager multiplexes its
	// forwarded calls on one connection, hence the generous value. gRPC's
	// own default is unlimited.
	DefaultMaxConcurrentStreams = 1024
	// streamWorkers is how many goroutines the API server keeps to run
	// calls on (grpc.NumStreamWorkers): a call handled by one of them
	// reuses its already grown stack instead of a fresh goroutine growing
	// one on every call (runtime.morestack/copystack, 4 % of the manager's
	// CPU at 64 CreateJob clients; issue 22 §2). A call arriving while all
	// are busy (they wait for the group commit) runs on a new goroutine,
	// as without the option. 128 idle workers hold a few MiB of stacks.
	streamWorkers = 128
)

// limitDefaults fills the zero limits of c.
func (c *Config) limitDefaults() {
	if c.MaxRecvMsgSize <= 0 {
		c.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if c.MaxSendMsgSize <= 0 {
		c.MaxSendMsgSize = DefaultMaxSendMsgSize
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
}

// limitOptions returns the API server's size and stream limits.
func (c Config) limitOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(c.MaxSendMsgSize),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.NumStreamWorkers(streamWorkers),
	}
}
