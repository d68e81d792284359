package gateway

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Pool limits and defaults (docs/design/pools.md).
const (
	maxPoolTiers     = 16
	maxSelectorTags  = 32
	maxPoolDescLen   = 1024
	maxCeilingFails  = 1000
	maxCeilingWindow = 24 * 60 * 60
	// maxPoolBytes bounds a pool's encoding, unknown fields included, as
	// jobs and bundles are bounded (the request limits already keep
	// pool.tiers within 1 MiB): a pool is read by every placement pass
	// and returned by every ListPools.
	maxPoolBytes = 1 << 20
	// defaultRestartFailures and defaultRestartWindowSeconds are the
	// restart ceiling stored for a pool that sets none: 5 failures in 10
	// minutes (issue 11 §4). The placement engine applies the same
	// default to jobs placed outside any pool.
	defaultRestartFailures      = 5
	defaultRestartWindowSeconds = 600
)

// validatePool checks a pool of CreatePool/UpdatePool and returns the
// pool to store: a copy with the default restart ceiling, linger and
// disconnect settings filled in and version and tier_status cleared (a version is the record's sequence, never stored).
// Errors are InvalidArgument naming the field ("pool.tiers[1].name"); the
// input is not modified.
func validatePool(p *managerpb.Pool) (*managerpb.Pool, error) {
	if err := checkNewID("pool.name", p.GetName()); err != nil {
		return nil, err
	}
	if n := proto.Size(p); n > maxPoolBytes {
		return nil, invalid("pool", "is %d bytes encoded; the limit is %d (1 MiB)", n, maxPoolBytes)
	}
	if err := checkPoolTiers(p.GetTiers()); err != nil {
		return nil, err
	}
	if d := p.GetDescription(); d != "" {
		if err := checkText("pool.description", d, maxPoolDescLen); err != nil {
			return nil, err
		}
	}
	if c := p.GetRestartCeiling(); c != nil {
		if err := checkCeiling(c); err != nil {
			return nil, err
		}
	}
	if err := checkPoolPriorities(p); err != nil {
		return nil, err
	}
	if err := checkPoolDisconnect(p.GetDisconnect()); err != nil {
		return nil, err
	}
	out := proto.Clone(p).(*managerpb.Pool)
	out.Version = 0
	out.TierStatus = nil
	withLingerDefaults(out.Tiers)
	if out.RestartCeiling == nil {
		out.RestartCeiling = &managerpb.RestartCeiling{MaxFailures: defaultRestartFailures, WindowSeconds: defaultRestartWindowSeconds}
	}
	withDisconnectDefaults(out)
	return out, nil
}

// checkPoolTiers checks 1..maxPoolTiers tiers with unique valid names and
// valid selectors.
func checkPoolTiers(tiers []*managerpb.PoolTier) error {
	switch {
	case len(tiers) == 0:
		return invalid("pool.tiers", "a pool needs at least one tier (tiers are ordered cheap to expensive)")
	case len(tiers) > maxPoolTiers:
		return invalid("pool.tiers", "has %d tiers, the limit is %d", len(tiers), maxPoolTiers)
	}
	seen := make(map[string]int, len(tiers))
	for i, t := range tiers {
		field := fmt.Sprintf("pool.tiers[%d]", i)
		if err := checkJobName(field+".name", t.GetName()); err != nil {
			return err
		}
		if j, dup := seen[t.GetName()]; dup {
			return invalid(field+".name", "%q is also the name of pool.tiers[%d]; tier names must be unique", t.GetName(), j)
		}
		seen[t.GetName()] = i
		if err := checkSelector(field+".node_selector", t.GetNodeSelector()); err != nil {
			return err
		}
		if err := checkTierProvisioner(field, t); err != nil {
			return err
		}
	}
	return nil
}

// checkSelector checks a node selector: at most maxSelectorTags entries,
// keys and values non-empty text (checkText, maxTagLen). Keys are checked
// in sorted order so the error names the same key every time.
func checkSelector(field string, sel map[string]string) error {
	if len(sel) > maxSelectorTags {
		return invalid(field, "has %d entries, the limit is %d", len(sel), maxSelectorTags)
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkText(field+" key", k, maxTagLen); err != nil {
			return err
		}
		if err := checkText(fmt.Sprintf("%s[%q]", field, k), sel[k], maxTagLen); err != nil {
			return err
		}
	}
	return nil
}

// checkCeiling checks a restart ceiling that is set: both numbers in range.
func checkCeiling(c *managerpb.RestartCeiling) error {
	if f := c.GetMaxFailures(); f < 1 || f > maxCeilingFails {
		return invalid("pool.restart_ceiling.max_failures", "is %d; it must be 1 to %d (leave restart_ceiling unset for the default, %d)",
			f, maxCeilingFails, defaultRestartFailures)
	}
	if w := c.GetWindowSeconds(); w < 1 || w > maxCeilingWindow {
		return invalid("pool.restart_ceiling.window_seconds", "is %d; it must be 1 to %d (24 hours; leave restart_ceiling unset for the default, %d)",
			w, maxCeilingWindow, defaultRestartWindowSeconds)
	}
	return nil
}

// checkPoolName validates the name of an existing pool named by a request
// (GetPool, DeletePool): the rule of new names, since pools have had it
// from the start.
func checkPoolName(field, name string) error { return checkNewID(field, name) }
