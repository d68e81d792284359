package node

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// PoolConfig configures the mock-pool grain.
type PoolConfig struct {
	Journal persistence.Journal
	// URLs is the pool (NORSK_MOCK_WORKER_URLS, in order): addresses
	// host:port of workers started without a token.
	URLs   []string
	Clock  func() time.Time
	Logger *slog.Logger
}

// PoolKind returns the kind of the mock-pool grain. Its single identity is
// "mock"; it hands out the pool's URLs in order, each once, remembering the
// position durably so a restarted manager never hands one out twice.
func PoolKind(cfg PoolConfig) actors.Kind {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return actors.Kind{Name: actors.KindPool, Props: func(string) *actor.Props {
		return actor.PropsFromProducer(func() actor.Actor { return &pool{cfg: cfg} })
	}}
}

type pool struct {
	cfg PoolConfig
	rec *internalpb.MockPoolRecord
	seq persistence.Seq
}

func (p *pool) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.load()
	case *internalpb.PoolCommand:
		// Decide on the newest committed record (actors.Current): an empty
		// pool is a state-based refusal.
		stale, fail := actors.Current(p.cfg.Journal, persistence.MockPoolKey, p.seq, nil)
		if fail != nil {
			ctx.Respond(fail)
			return
		}
		if stale {
			p.load()
		}
		ctx.Respond(p.pop(m.GetRequestId()))
	}
}

func (p *pool) load() {
	rec := &internalpb.MockPoolRecord{}
	found, seq, err := actors.LoadRecord(p.cfg.Journal, persistence.MockPoolKey, rec)
	if err != nil {
		panic(fmt.Sprintf("mock pool: %v", err))
	}
	p.seq = seq
	if !found {
		rec = &internalpb.MockPoolRecord{}
	}
	p.rec = rec
}

// handed returns the URL request reqID was handed, if it is one of the
// recent requests: its own (recent_indexes), or in a record of before
// that field the last one handed out (the old answer).
func (p *pool) handed(reqID string) (string, bool) {
	if reqID == "" {
		return "", false
	}
	k := slices.Index(p.rec.GetRecentRequests(), reqID)
	if k < 0 {
		return "", false
	}
	idx := int(p.rec.GetNext()) - 1
	if ix := p.rec.GetRecentIndexes(); len(ix) == len(p.rec.GetRecentRequests()) {
		idx = int(ix[k])
	}
	if idx < 0 || idx >= len(p.cfg.URLs) {
		return "", false // the URL list shrank since: hand out a new one
	}
	return p.cfg.URLs[idx], true
}

// pop hands out the next URL, once per request id: a repeated request
// (a retried create, a second leader) gets the URL it was handed first,
// not the last one handed out (which another node may have taken since).
func (p *pool) pop(reqID string) *internalpb.Reply {
	if url, ok := p.handed(reqID); ok {
		return &internalpb.Reply{Payload: &internalpb.Reply_MockUrl{MockUrl: url}}
	}
	i := int(p.rec.GetNext())
	if i >= len(p.cfg.URLs) {
		return actors.Fail(errorpb.Code_RESOURCE_EXHAUSTED,
			"mock node pool is empty: all %d URLs of NORSK_MOCK_WORKER_URLS have been handed out", len(p.cfg.URLs))
	}
	next := proto.Clone(p.rec).(*internalpb.MockPoolRecord)
	next.Next++
	if reqID != "" {
		if len(next.RecentIndexes) != len(next.RecentRequests) {
			// A record of before recent_indexes: its requests keep the
			// answer they had then, the last URL handed out.
			next.RecentIndexes = make([]uint32, len(next.RecentRequests))
			for k := range next.RecentIndexes {
				next.RecentIndexes[k] = uint32(max(i-1, 0))
			}
		}
		next.RecentRequests = actors.RememberRequest(next.RecentRequests, reqID)
		next.RecentIndexes = append(next.RecentIndexes, uint32(i))
		next.RecentIndexes = next.RecentIndexes[len(next.RecentIndexes)-len(next.RecentRequests):]
	}
	res, fail := actors.Commit(p.cfg.Journal, persistence.MockPoolKey, p.seq, reqID, next, nil, p.cfg.Clock(), 10*time.Second)
	if fail != nil || res.Duplicate {
		p.load()
		if fail != nil {
			return fail
		}
		if url, ok := p.handed(reqID); ok {
			return &internalpb.Reply{Payload: &internalpb.Reply_MockUrl{MockUrl: url}}
		}
		return &internalpb.Reply{Payload: &internalpb.Reply_MockUrl{MockUrl: p.cfg.URLs[p.rec.GetNext()-1]}}
	}
	p.rec, p.seq = next, res.Seq
	p.cfg.Logger.Info("mock pool URL handed out", "url", p.cfg.URLs[i], "left", len(p.cfg.URLs)-i-1)
	return &internalpb.Reply{Payload: &internalpb.Reply_MockUrl{MockUrl: p.cfg.URLs[i]}}
}
