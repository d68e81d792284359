package agent

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// healthAttempts bounds the retries of one health publication that lost a
// race with another manager's.
const healthAttempts = 3

// watchProviderHealth publishes every health change of the configured
// cloud providers: the provider's health record (entity provider/<name>,
// what initial_data_complete carries) is updated with a
// provider_health_change event. Best effort: a change that cannot be
// written (no quorum) is logged and the next change carries the whole
// picture again.
func (a *Agent) watchProviderHealth() {
	if len(a.cfg.Node.Providers) == 0 {
		return
	}
	for kind, p := range a.cfg.Node.Providers {
		name := providerName(kind)
		a.seedHealth(kind, name, p.Health())
		p.Health().SetOnChange(func(location string, h managerpb.Health) {
			a.publishHealth(kind, name, location, h)
		})
	}
	// Recoveries happen with time, not with calls: look once a minute.
	ctx, cancel := context.WithCancel(context.Background())
	a.healthStop = cancel
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(healthRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, p := range a.cfg.Node.Providers {
					p.Health().Snapshot() // publishes locations whose window passed
				}
			}
		}
	}()
}

// healthRefresh is how often provider health is re-evaluated without calls.
const healthRefresh = time.Minute

func providerName(kind managerpb.NodeProvider) string {
	return strings.ToLower(strings.TrimPrefix(kind.String(), "NODE_PROVIDER_"))
}

// seedHealth starts a tracker from the published record, so that a
// FAILED or UNSTABLE location published before a restart recovers (and
// is published as recovered) instead of staying stale.
func (a *Agent) seedHealth(kind managerpb.NodeProvider, name string, h interface {
	Seed(string, managerpb.Health)
}) {
	rec := &internalpb.ProviderHealthRecord{}
	found, _, err := actors.LoadRecord(a.journal, persistence.ProviderKey(name), rec)
	if err != nil || !found {
		return
	}
	for _, r := range rec.GetHealth().GetAws().GetRegionHealth() {
		h.Seed(r.GetRegion(), r.GetHealth())
	}
	for _, r := range rec.GetHealth().GetOci().GetRegionHealth() {
		h.Seed(r.GetAvailabilityDomain(), r.GetHealth())
	}
}

func (a *Agent) publishHealth(kind managerpb.NodeProvider, name, location string, h managerpb.Health) {
	a.healthMu.Lock()
	defer a.healthMu.Unlock()
	key := persistence.ProviderKey(name)
	for attempt := 0; attempt < healthAttempts; attempt++ {
		rec := &internalpb.ProviderHealthRecord{}
		_, seq, err := actors.LoadRecord(a.journal, key, rec)
		if err != nil {
			a.log.Warn("cannot publish provider health", "provider", name, "location", location, "error", err)
			return
		}
		rec.Health = setHealth(kind, rec.GetHealth(), location, h)
		ev := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_ProviderHealthChange{ProviderHealthChange: rec.GetHealth()}}
		if _, fail := actors.Commit(a.journal, key, seq, "", rec, []*managerpb.EventStreamEvent{ev}, time.Now(), 10*time.Second); fail == nil {
			a.log.Info("provider health changed", "provider", name, "location", location, "health", h.String())
			return
		} else if attempt == healthAttempts-1 {
			a.log.Warn("cannot publish provider health", "provider", name, "location", location, "error", fail.GetMessage())
		}
	}
}

// setHealth returns ph with location's health set (locations sorted).
func setHealth(kind managerpb.NodeProvider, ph *managerpb.ProviderHealth, location string, h managerpb.Health) *managerpb.ProviderHealth {
	if kind == managerpb.NodeProvider_NODE_PROVIDER_OCI {
		list := ph.GetOci().GetRegionHealth()
		found := false
		for _, r := range list {
			if r.GetAvailabilityDomain() == location {
				r.Health, found = h, true
			}
		}
		if !found {
			list = append(list, &managerpb.OciRegionHealth{AvailabilityDomain: location, Health: h})
		}
		sort.Slice(list, func(i, j int) bool { return list[i].GetAvailabilityDomain() < list[j].GetAvailabilityDomain() })
		return &managerpb.ProviderHealth{Health: &managerpb.ProviderHealth_Oci{Oci: &managerpb.OciHealth{RegionHealth: list}}}
	}
	list := ph.GetAws().GetRegionHealth()
	found := false
	for _, r := range list {
		if r.GetRegion() == location {
			r.Health, found = h, true
		}
	}
	if !found {
		list = append(list, &managerpb.AwsRegionHealth{Region: location, Health: h})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].GetRegion() < list[j].GetRegion() })
	return &managerpb.ProviderHealth{Health: &managerpb.ProviderHealth_Aws{Aws: &managerpb.AwsHealth{RegionHealth: list}}}
}
