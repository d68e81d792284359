package provisioner

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Backoff of an offering after capacity errors (after Karpenter's
// insufficient-capacity cache, which keeps an offering out for 3 minutes):
// the n-th capacity failure of an offering within BackoffWindow keeps it
// out for BackoffBase·2^(n-1), at most BackoffMax, from that failure.
const (
	BackoffBase   = 2 * time.Minute
	BackoffMax    = 30 * time.Minute
	BackoffWindow = time.Hour
)

// Backoff is an offering of a tier kept out until Until.
type Backoff struct {
	Pool, Tier, Offering string
	Until                time.Time
	// Reason is the cloud's error of the last failure.
	Reason string
	// Failures is the number of capacity failures in the window.
	Failures int
}

// Backoffs returns the offerings kept out at now, read from the records of
// the nodes whose create failed (Node.CapacityError, Node.CreateFailed;
// the failure's time is the node's CreatedAt: the launch is the first
// thing a create does). A failure other than capacity (a launch template
// that does not exist, a rejected request) is backed off the same way:
// such a launch fails at once, so without it every pass would create the
// next node of the tier (a record and a cloud call each). A create that
// failed for a missing security group (Node.MissingGroups) is not: the
// job or the tier named a group that does not exist, which says nothing
// of the offering, and Plan keeps the group out instead (groups.go).
// Sorted by pool, tier, offering.
func Backoffs(nodes []Node, now time.Time) []Backoff {
	type off struct{ pool, tier, offering string }
	fails := map[off][]Node{}
	for _, n := range nodes {
		if (n.CapacityError || n.CreateFailed) && len(n.MissingGroups) == 0 && now.Sub(n.CreatedAt) < BackoffWindow {
			k := off{n.Pool, n.Tier, n.Offering}
			fails[k] = append(fails[k], n)
		}
	}
	var out []Backoff
	for k, fs := range fails {
		slices.SortFunc(fs, func(a, b Node) int { return a.CreatedAt.Compare(b.CreatedAt) })
		last := fs[len(fs)-1]
		d := min(BackoffBase<<min(len(fs)-1, 10), BackoffMax)
		if until := last.CreatedAt.Add(d); until.After(now) {
			what := "capacity failure(s)"
			if slices.ContainsFunc(fs, func(n Node) bool { return !n.CapacityError }) {
				what = "failed create(s)"
			}
			out = append(out, Backoff{Pool: k.pool, Tier: k.tier, Offering: k.offering, Until: until, Failures: len(fs),
				Reason: fmt.Sprintf("%d %s in the last hour; the last on node %s: %s", len(fs), what, last.ID, last.LastError)})
		}
	}
	slices.SortFunc(out, func(a, b Backoff) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		if c := strings.Compare(a.Tier, b.Tier); c != 0 {
			return c
		}
		return strings.Compare(a.Offering, b.Offering)
	})
	return out
}
