package placement

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
)

// Missing security groups (issue 21 §9; pools.md, "Security groups of a
// job in an AWS tier"): before it creates an AWS node the engine looks up the
// security groups the node would carry (the tier's and its jobs' extra
// groups) in the tier's region. When one is missing no node is created;
// the group is kept out for provisioner.GroupRetry, so the next pass
// plans the tier's other jobs without the job that named it, and says on
// that job which group is missing in which region (its placement failure:
// GetPlacement, placement_failed, norsk-ctl job placement). Nothing is
// backed off: the offering is not at fault. After GroupRetry the group is
// looked up again: an operator may have created it.

// SecurityGroupChecker looks security groups up in an AWS region.
type SecurityGroupChecker interface {
	// MissingSecurityGroups returns the names among names that are no
	// security group in region (nil when all exist); an error when the
	// cloud could not answer.
	MissingSecurityGroups(ctx context.Context, region string, names []string) ([]string, error)
}

// groupState is the engine's memory of missing security groups. Guarded
// by provState.mu; made on first use.
type groupState struct {
	// missing holds each group found missing, by region and name.
	missing map[string]provisioner.MissingGroup
	// checking holds the regions with a look-up of their missing groups
	// in flight.
	checking map[string]bool
	// warned holds the groups logged at warn as missing, until found.
	warned map[string]bool
}

func (g *groupState) init() {
	if g.missing == nil {
		g.missing, g.checking, g.warned = map[string]provisioner.MissingGroup{}, map[string]bool{}, map[string]bool{}
	}
}

// missingGroups returns the groups found missing, to keep out at now.
// A group whose provisioner.GroupRetry has ended is looked up again in the
// background (one look-up per region) and kept out meanwhile, so that its
// jobs' reason does not flip to "being created" and back on every
// retry: found, it is forgotten and the next pass creates nodes for its
// jobs; missing, it is kept out for another GroupRetry.
func (e *Engine) missingGroups(ctx context.Context, now time.Time) []provisioner.MissingGroup {
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	e.prov.groups.init()
	var out []provisioner.MissingGroup
	due := map[string][]string{}
	for _, m := range e.prov.groups.missing {
		if now.Before(m.At.Add(provisioner.GroupRetry)) {
			out = append(out, m)
			continue
		}
		m.Until = now.Add(provisioner.GroupRetry) // until the look-up answers
		out = append(out, m)
		if !e.prov.groups.checking[m.Region] {
			due[m.Region] = append(due[m.Region], m.Group)
		}
	}
	for region, names := range due {
		slices.Sort(names)
		e.prov.groups.checking[region] = true
		e.inBackground(func() { e.recheckGroups(ctx, region, names) })
	}
	slices.SortFunc(out, func(a, b provisioner.MissingGroup) int {
		return strings.Compare(a.Region+"\x00"+a.Group, b.Region+"\x00"+b.Group)
	})
	return out
}

// recheckGroups looks the missing groups names of region up again.
func (e *Engine) recheckGroups(ctx context.Context, region string, names []string) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	missing, err := e.cfg.SecurityGroups.MissingSecurityGroups(rctx, region, names)
	cancel()
	now := e.cfg.Clock()
	e.prov.mu.Lock()
	delete(e.prov.groups.checking, region)
	var found []string
	for _, g := range names {
		k := region + "\x00" + g
		m, ok := e.prov.groups.missing[k]
		switch {
		case !ok:
		case err != nil || slices.Contains(missing, g):
			m.At, m.Until = now, time.Time{}
			e.prov.groups.missing[k] = m
		default:
			delete(e.prov.groups.missing, k)
			delete(e.prov.groups.warned, k)
			found = append(found, g)
		}
	}
	e.prov.mu.Unlock()
	switch {
	case err != nil && ctx.Err() == nil:
		e.log.Warn("look up missing security groups again (tried again after "+provisioner.GroupRetry.String()+")", "region", region,
			"groups", strings.Join(names, ","), "error", err)
	case len(found) > 0:
		e.log.Info("security group found: the jobs that name it get nodes again", "region", region, "groups", strings.Join(found, ","))
	}
}

// groupsMissing looks up the security groups of c, an AWS node to create,
// and reports whether any is missing; those are kept out from now
// (missingGroups). A look-up the cloud cannot answer creates the node
// anyway: its launch looks again, and fails the node if it must.
func (e *Engine) groupsMissing(ctx context.Context, now time.Time, c provisioner.Create, log *slog.Logger) bool {
	a := c.Tier.GetAws()
	if a == nil || len(c.SecurityGroups) == 0 || e.cfg.SecurityGroups == nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	missing, err := e.cfg.SecurityGroups.MissingSecurityGroups(rctx, a.GetRegion(), c.SecurityGroups)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("look up the security groups of a node to create (creating it anyway; its launch looks again)", "region", a.GetRegion(),
				"groups", strings.Join(c.SecurityGroups, ","), "error", err)
		}
		return false
	}
	e.prov.mu.Lock()
	e.prov.groups.init()
	var fresh []string
	for _, g := range c.SecurityGroups {
		k := a.GetRegion() + "\x00" + g
		if !slices.Contains(missing, g) {
			delete(e.prov.groups.warned, k)
			continue
		}
		e.prov.groups.missing[k] = provisioner.MissingGroup{Region: a.GetRegion(), Group: g, At: now}
		if !e.prov.groups.warned[k] {
			e.prov.groups.warned[k] = true
			fresh = append(fresh, g)
		}
	}
	e.prov.mu.Unlock()
	if len(fresh) > 0 {
		log.Warn("security group missing in the tier's region: no node is created for the jobs that name it, the tier serves the others; "+
			"looked up again every "+provisioner.GroupRetry.String()+" (not logged again until it has been found)", "region", a.GetRegion(), "missing", strings.Join(fresh, ","))
	}
	return len(missing) > 0
}
