package gateway

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// resetReason says why an event stream cannot resume after index n from a
// log retaining first..head whose history restarted after base (0: it
// never did; persistence.Store.RestartEventLog), or "" if it can. A log
// restarted by a restore or a recovery retains nothing below its base, so
// every index of the history before it is reset (docs/design/backup.md).
func resetReason(n, first, head, base persistence.Index) string {
	switch {
	case base > 0 && n < base:
		return fmt.Sprintf("index %d is from before this manager's state was restored from a backup or recovered (its event log restarted after index %d)", n, base)
	case n > head:
		return fmt.Sprintf("index %d is beyond the log head %d (the manager's state was replaced?)", n, head)
	case n+1 < first:
		return fmt.Sprintf("index %d is older than the oldest retained event %d", n, first)
	}
	return ""
}
