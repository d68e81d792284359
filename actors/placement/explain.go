package placement

import (
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Decided is what the engine chose for a (job, role) the job grain
// accepted: the tier and the degraded failure domains, which the job
// record does not keep. For GetPlacement.
type Decided struct {
	// Node is the node the role was started on.
	Node string
	// Tier is the pool tier chosen; "" for a job without a pool.
	Tier string
	// Degraded names the failure domains ("node", "zone", "cloud") shared
	// with the other replica against the resilience policy; nil if kept.
	Degraded []string
}

// RoleExplanation is the engine's memory of one role of a job: the last
// accepted decision, the last failure, or both (a role placed, then lost,
// then not placeable again: Failure is the newer).
type RoleExplanation struct {
	Role    string
	Decided *Decided
	Failure *Unplaced
}

// Explain returns what this engine knows of job's roles, primary first.
// It knows only its own leadership term: a role placed by an earlier
// leader, or by hand, has no Decided.
func (e *Engine) Explain(job string) []RoleExplanation {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []RoleExplanation
	for _, r := range []scheduler.Role{scheduler.RolePrimary, scheduler.RoleBackup} {
		k := key{scheduler.JobID(job), r}
		x := RoleExplanation{Role: string(r)}
		if d, ok := e.decided[k]; ok {
			x.Decided = &d
		}
		if u, ok := e.failures[k]; ok {
			x.Failure = &u
		}
		if x.Decided != nil || x.Failure != nil {
			out = append(out, x)
		}
	}
	return out
}

// remember keeps d, carried out with note, as the accepted decision of k,
// under k's logical role (a move's target, "primary~2", is "primary" for
// Explain: the newest decision of the role).
func (e *Engine) remember(k key, d scheduler.Decision, note *internalpb.PlacementNote) {
	k.role = scheduler.Role(roles.LogicalRole(string(k.role)))
	dd := Decided{Node: string(d.Node), Tier: d.Tier, Degraded: note.GetDegradedAtPlacement()}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.decided == nil {
		e.decided = map[key]Decided{}
	}
	e.decided[k] = dd
}
