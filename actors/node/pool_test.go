package node

import (
	"log/slog"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// TestPool_RepeatedRequestGetsItsOwnURL: a pop repeated with the same
// request id (the engine's create of node N retried after the create was
// refused, or a second leader creating N) gets the URL it was handed the
// first time, even when another request took the next URL meanwhile, and
// also from a new activation (read from the record). Before, a repeat got
// the last URL handed out: two nodes then dialled the same worker, and
// the first URL was never used.
func TestPool_RepeatedRequestGetsItsOwnURL(t *testing.T) {
	_, log := persistence.TestStore(t)
	cfg := PoolConfig{Journal: log, URLs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}, Clock: time.Now, Logger: slog.New(slog.DiscardHandler)}
	p := &pool{cfg: cfg}
	p.load()
	pop := func(p *pool, req string) string {
		t.Helper()
		r := p.pop(req)
		if r.GetMockUrl() == "" {
			t.Fatalf("pop(%s) = %v", req, r)
		}
		return r.GetMockUrl()
	}
	if got := pop(p, "provision/a-1"); got != "127.0.0.1:7001" {
		t.Fatalf("first pop = %s", got)
	}
	if got := pop(p, "provision/b-1"); got != "127.0.0.1:7002" {
		t.Fatalf("second pop = %s", got)
	}
	if got := pop(p, "provision/a-1"); got != "127.0.0.1:7001" {
		t.Fatalf("repeated first pop = %s, want its own URL 127.0.0.1:7001", got)
	}
	fresh := &pool{cfg: cfg}
	fresh.load()
	if got := pop(fresh, "provision/a-1"); got != "127.0.0.1:7001" {
		t.Fatalf("repeated first pop on a new activation = %s", got)
	}
	if got := pop(fresh, "provision/c-1"); got != "127.0.0.1:7003" {
		t.Fatalf("third pop = %s", got)
	}
	if r := fresh.pop("provision/d-1"); r.GetMockUrl() != "" {
		t.Fatalf("pop of an empty pool = %v", r)
	}
}

// TestPool_OldRecord: a record written before recent_indexes answers its
// old requests as before (the last URL handed out) and tracks new ones.
func TestPool_OldRecord(t *testing.T) {
	_, log := persistence.TestStore(t)
	cfg := PoolConfig{Journal: log, URLs: []string{"u1", "u2", "u3"}, Clock: time.Now, Logger: slog.New(slog.DiscardHandler)}
	p := &pool{cfg: cfg}
	p.rec = &internalpb.MockPoolRecord{Next: 1, RecentRequests: []string{"old"}}
	if got := p.pop("old").GetMockUrl(); got != "u1" {
		t.Fatalf("old request = %s", got)
	}
	if got := p.pop("new").GetMockUrl(); got != "u2" {
		t.Fatalf("new request = %s", got)
	}
	if got := p.pop("old").GetMockUrl(); got != "u1" {
		t.Fatalf("old request after a new one = %s, want u1", got)
	}
	if got := p.pop("new").GetMockUrl(); got != "u2" {
		t.Fatalf("new request repeated = %s", got)
	}
}
