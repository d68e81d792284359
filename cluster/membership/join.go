package membership

import (
	"context"
	"slices"
	"time"
)

// joinLoop joins Config.Join until another manager has accepted this one
// (see acceptance): with exponential backoff while no seed answers, every
// JoinRetryMin while seeds answer but have not confirmed us. Then it re-joins seeds that are not members every
// RejoinInterval. It runs in its own goroutine (started by New, owned by
// the Membership's WaitGroup) until Leave or Shutdown cancels ctx.
func (m *Membership) joinLoop(ctx context.Context) {
	seeds := slices.DeleteFunc(slices.Clone(m.cfg.Join), func(s string) bool { return s == m.localAddr })
	if len(seeds) == 0 {
		return
	}
	backoff := m.cfg.JoinRetryMin
	for !m.accepted.Load() {
		m.joinAttempts.Add(1)
		n, err := m.ml.Join(seeds)
		if m.accepted.Load() {
			break
		}
		wait := backoff
		if n > 0 {
			// A seed answered but has not confirmed us yet (first join, or
			// our old incarnation still holds our name): confirm soon.
			wait = m.cfg.JoinRetryMin
			m.logger.Debug("joined, waiting to be accepted", "seeds_answered", n, "retry_in", wait)
		} else {
			m.logger.Warn("join failed, retrying", "seeds", seeds, "retry_in", wait, "error", err)
			backoff = min(2*backoff, m.cfg.JoinRetryMax)
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
	m.logger.Info("joined the cluster", "members", m.ml.NumMembers(), "attempts", m.joinAttempts.Load())
	if m.cfg.RejoinInterval == 0 {
		return
	}
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.rejoinMissing(seeds)
		}
	}
}

// rejoinMissing joins the seeds whose address is not a current member's:
// memberlist never probes or push/pulls dead members again, so without this
// two sides of a long partition would stay apart.
func (m *Membership) rejoinMissing(seeds []string) {
	present := map[string]bool{}
	for _, mem := range m.Members() {
		present[mem.Addr] = true
	}
	var missing []string
	for _, s := range seeds {
		if !present[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return
	}
	m.joinAttempts.Add(1)
	if n, err := m.ml.Join(missing); err != nil {
		m.logger.Debug("re-join of missing seeds failed", "seeds", missing, "error", err)
	} else {
		m.logger.Debug("re-joined missing seeds", "seeds", missing, "answered", n)
	}
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
