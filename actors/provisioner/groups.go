package provisioner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Missing security groups (issue 21 §9; pools.md, "Security groups of a
// job in an AWS tier"): a job's (or tier's) extra security group that does not exist
// in the tier's region is the fault of whoever named it, not of the
// offering. No node is created for a job that needs it: Plan leaves the
// job unserved by that tier with a reason naming the group and the
// region, keeps the tier open for every other job, and backs nothing off.
// The engine learns a group is missing from its look-up before a create
// (Input.MissingGroups) or from a node whose launch found it missing after
// all (a group deleted in between: Node.MissingGroups); either keeps the
// group out for GroupRetry, then the engine looks again (groups can be
// created later).

// GroupRetry is how long a security group found missing in a region keeps
// the nodes that would carry it from being created, from the look-up (or
// from the record of the node whose launch found it missing); after it the
// engine looks the group up again.
const GroupRetry = 15 * time.Second

// MissingGroup is a security group found missing in an AWS region.
type MissingGroup struct {
	Region, Group string
	// At is when it was found missing; it is kept out until At+GroupRetry
	// (Until, when set, instead).
	At    time.Time
	Until time.Time
	// Node is the node whose launch found it missing; "" for the engine's
	// look-up before a create.
	Node string
}

func (m MissingGroup) until() time.Time {
	if !m.Until.IsZero() {
		return m.Until
	}
	return m.At.Add(GroupRetry)
}

// groupErrorText is the text of providers.ErrSecurityGroupNotFound, which
// starts the text of providers.SecurityGroupsMissingError and so
// CloudNode.last_error. Matched as text: the error crossed a record.
const groupErrorText = "providers: security group not found: "

// MissingGroupsOf reads the region and the group names back from the text
// of a providers.SecurityGroupsMissingError
// (`providers: security group not found: "a", "b" in region R[: cause]`);
// ok is false for any other text.
func MissingGroupsOf(text string) (region string, groups []string, ok bool) {
	_, rest, found := strings.Cut(text, groupErrorText)
	if !found {
		return "", nil, false
	}
	for {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", nil, false
		}
		g, _ := strconv.Unquote(q)
		groups = append(groups, g)
		rest = rest[len(q):]
		if r, more := strings.CutPrefix(rest, ", "); more {
			rest = r
			continue
		}
		break
	}
	rest, found = strings.CutPrefix(rest, " in region ")
	if !found {
		return "", nil, false
	}
	region, _, _ = strings.Cut(rest, ":")
	return region, groups, region != ""
}

// missingGroups indexes the groups kept out at now by region and name:
// in's look-ups and the recent nodes whose launch found groups missing.
func missingGroups(in Input) map[string]MissingGroup {
	out := map[string]MissingGroup{}
	add := func(m MissingGroup) {
		k := m.Region + "\x00" + m.Group
		if old, ok := out[k]; !in.Now.Before(m.until()) || ok && !m.until().After(old.until()) {
			return
		}
		out[k] = m
	}
	for _, m := range in.MissingGroups {
		add(m)
	}
	for _, n := range in.Nodes {
		for _, g := range n.MissingGroups {
			add(MissingGroup{Region: n.Region, Group: g, At: n.CreatedAt, Node: n.ID})
		}
	}
	return out
}

// groupProblem says why a node of tier i (new, or being planned) cannot
// be created for w: a security group the node would carry (the tier's
// extra_security_groups and w's) is missing in the tier's region; "" when
// none is, or the tier is not AWS.
func (pp *poolPlan) groupProblem(i int, w Waiting) string {
	t := pp.pool.GetTiers()[i]
	a := t.GetAws()
	if a == nil || len(pp.missing) == 0 {
		return ""
	}
	type named struct{ group, by string }
	var all []named
	for _, g := range w.SecurityGroups {
		all = append(all, named{g, "the job's extra_security_groups"})
	}
	for _, g := range a.GetExtraSecurityGroups() {
		all = append(all, named{g, "the tier's extra_security_groups"})
	}
	var why []string
	for _, n := range all {
		m, ok := pp.missing[a.GetRegion()+"\x00"+n.group]
		if !ok || slices.ContainsFunc(why, func(s string) bool { return strings.Contains(s, strconv.Quote(n.group)) }) {
			continue
		}
		// No instants in the text: it is the job's placement failure,
		// written (and raised as placement_failed) again on every change.
		found := "looked up again every " + GroupRetry.String()
		if m.Node != "" {
			found = "the launch of node " + m.Node + " found it missing; " + found
		}
		why = append(why, fmt.Sprintf("security group %q (%s) does not exist in region %s (%s); "+
			"no node is created for the job until it does", n.group, n.by, a.GetRegion(), found))
	}
	return strings.Join(why, "; ")
}
