// Package roles names the roles of a job's instances during and after a
// make-before-break move (docs/design/placement.md, "Moves").
//
// The worker keys a job by (job, role), so a move's target instance runs
// under a role of its own while the source still runs: "<logical>~<n>",
// where n is the job's move counter (JobRecord.move_count). After the move
// the target's role is the one that runs. Everything that asks "does role
// R of the job have an instance, how often did it fail, where is the
// other replica" compares logical roles: the text before the first "~".
package roles

import (
	"fmt"
	"strings"
)

// Sep separates a logical role from its move counter in a target role.
const Sep = "~"

// LogicalRole returns the logical role of role: the text before the first
// "~" ("primary~3" → "primary"), or role itself when it has none.
func LogicalRole(role string) string {
	if i := strings.Index(role, Sep); i >= 0 {
		return role[:i]
	}
	return role
}

// TargetRole returns the role a move's target runs under: "<logical>~<n>"
// with logical the logical role of role and n the job's move counter after
// the move began (1 for the first move).
func TargetRole(role string, n uint32) string {
	return fmt.Sprintf("%s%s%d", LogicalRole(role), Sep, n)
}

// IsMoved reports whether role is a move's role ("primary~2"): one an
// operator may stop but never start by name.
func IsMoved(role string) bool { return strings.Contains(role, Sep) }
