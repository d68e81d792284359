package main

import (
	"math"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cluster/gateway"
)

// limitOptions are the daemon's hostile-input limits
// (docs/design/security.md, "Limits").
type limitOptions struct {
	maxRecv, maxSend      bytesFlag
	eventStreamMemory     bytesFlag
	maxStreams            uint32
	eventStreamsPerCaller int
	searchesPerCaller     int
	searches              int
	registerRate          float64
	registerBurst         int
}

// Bounds of the limit flags: below them the manager's own messages (a 1 MiB
// job, a job record of 1.5 MiB with its history) or a manager's internal
// calls would not fit.
const (
	minRecvMsgSize       = 1 << 20
	minSendMsgSize       = 4 << 20
	maxMsgSize           = 1 << 30
	minConcurrentStreams = 16
	// minEventStreamMemory is one event stream's own bound
	// (gateway.EventStreamConfig.MaxQueueBytes): a budget below it could
	// not hold one stream's queue.
	minEventStreamMemory = 16 << 20
	maxEventStreamMemory = 1 << 40
)

func (o *limitOptions) addFlags(f *pflag.FlagSet) {
	o.maxRecv = agent.DefaultMaxRecvMsgSize
	o.maxSend = agent.DefaultMaxSendMsgSize
	f.Var(&o.maxRecv, "max-recv-msg-size", "limit: the largest request the API accepts (RESOURCE_EXHAUSTED beyond); a job or bundle is at most 1 MiB")
	f.Var(&o.maxSend, "max-send-msg-size", "limit: the largest response the API sends (the call fails with RESOURCE_EXHAUSTED beyond)")
	f.Uint32Var(&o.maxStreams, "max-concurrent-streams", agent.DefaultMaxConcurrentStreams,
		"limit: calls one client connection may have in flight at once; further calls wait in the client until one ends")
	f.IntVar(&o.eventStreamsPerCaller, "max-event-streams-per-caller", gateway.DefaultMaxEventStreamsPerCaller,
		"limit: event streams one caller (its ACL token, or its IP address without ACLs) may hold open; one more gets RESOURCE_EXHAUSTED; 0: no limit")
	f.IntVar(&o.searchesPerCaller, "max-job-searches-per-caller", gateway.DefaultMaxJobSearchesPerCaller,
		"limit: JobSearch calls one caller (its ACL token, or its IP address without ACLs) may have running at once; one more gets RESOURCE_EXHAUSTED; 0: no limit")
	f.IntVar(&o.searches, "max-job-searches", gateway.DefaultMaxJobSearches,
		"limit: JobSearch calls the manager serves at once (each holds up to 1 MiB of jobs while its client reads); one more gets RESOURCE_EXHAUSTED; 0: no limit")
	o.eventStreamMemory = gateway.DefaultEventStreamMemory
	f.Var(&o.eventStreamMemory, "event-stream-memory",
		"limit: the bytes all event streams together may hold for clients that read slower than events come (each at most 16 MiB); past it the slowest stream (its client longest without accepting a message) is ended with RESOURCE_EXHAUSTED and the index to resume from")
	f.Float64Var(&o.registerRate, "register-rate", float64(gateway.DefaultRegisterRate),
		"limit: worker registrations (ClusterMemberRegister) per second one IP address may make on average; more get RESOURCE_EXHAUSTED with a retry-after; 0: no limit")
	f.IntVar(&o.registerBurst, "register-burst", gateway.DefaultRegisterBurst,
		"limit: registrations one IP address may make at once before --register-rate applies (workers starting together behind one NAT address)")
}

// apply checks the flags (a usage error naming the flag) and sets them on cfg.
func (o *limitOptions) apply(cfg *agent.Config) error {
	switch {
	case o.maxRecv < minRecvMsgSize || o.maxRecv > maxMsgSize:
		return usagef("--max-recv-msg-size %s: must be %s to %s (a job or bundle may be 1 MiB encoded)",
			o.maxRecv.String(), humanize.IBytes(minRecvMsgSize), humanize.IBytes(maxMsgSize))
	case o.maxSend < minSendMsgSize || o.maxSend > maxMsgSize:
		return usagef("--max-send-msg-size %s: must be %s to %s (a job with its history may be 1.5 MiB)",
			o.maxSend.String(), humanize.IBytes(minSendMsgSize), humanize.IBytes(maxMsgSize))
	case o.maxStreams < minConcurrentStreams:
		return usagef("--max-concurrent-streams %d: must be at least %d (managers multiplex their calls to each other on one connection)",
			o.maxStreams, minConcurrentStreams)
	case o.eventStreamMemory < minEventStreamMemory || o.eventStreamMemory > maxEventStreamMemory:
		return usagef("--event-stream-memory %s: must be %s to %s (one event stream alone may hold 16 MiB)",
			o.eventStreamMemory.String(), humanize.IBytes(minEventStreamMemory), humanize.IBytes(maxEventStreamMemory))
	case o.eventStreamsPerCaller < 0:
		return usagef("--max-event-streams-per-caller %d: must be 0 (no limit) or more", o.eventStreamsPerCaller)
	case o.searchesPerCaller < 0:
		return usagef("--max-job-searches-per-caller %d: must be 0 (no limit) or more", o.searchesPerCaller)
	case o.searches < 0:
		return usagef("--max-job-searches %d: must be 0 (no limit) or more", o.searches)
	case o.registerRate < 0 || math.IsNaN(o.registerRate) || math.IsInf(o.registerRate, 0):
		return usagef("--register-rate %g: must be 0 (no limit) or a positive number per second", o.registerRate)
	case o.registerBurst < 1:
		return usagef("--register-burst %d: must be at least 1", o.registerBurst)
	}
	cfg.MaxRecvMsgSize = int(o.maxRecv)
	cfg.MaxSendMsgSize = int(o.maxSend)
	cfg.MaxConcurrentStreams = o.maxStreams
	cfg.Events.MaxTotalBytes = int64(o.eventStreamMemory)
	cfg.Limits.MaxEventStreamsPerCaller = o.eventStreamsPerCaller
	if o.eventStreamsPerCaller == 0 {
		cfg.Limits.MaxEventStreamsPerCaller = -1 // gateway.LimitsConfig: negative is no limit
	}
	cfg.Limits.MaxJobSearchesPerCaller, cfg.Limits.MaxJobSearches = noLimitIfZero(o.searchesPerCaller), noLimitIfZero(o.searches)
	cfg.Limits.RegisterRate = rate.Limit(o.registerRate)
	if o.registerRate == 0 {
		cfg.Limits.RegisterRate = -1
	}
	cfg.Limits.RegisterBurst = o.registerBurst
	return nil
}

// noLimitIfZero maps a flag's 0 (no limit) to gateway.LimitsConfig's
// negative (its 0 takes the default).
func noLimitIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
