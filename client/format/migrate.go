package format

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// MigrationDetails renders a move in one line: "job=J primary → primary~1
// node=a → b (drain) phase=starting".
func MigrationDetails(job string, m *managerpb.Migration) string {
	to := m.GetTargetNodeId()
	if to == "" {
		to = m.GetRequestedNodeId()
	}
	if to == "" {
		to = "any"
	}
	return join(fmt.Sprintf("job=%s %s → %s node=%s → %s (%s) phase=%s", Value(job), Value(m.GetSourceRole()), Value(m.GetTargetRole()),
		Value(m.GetSourceNodeId()), to, Enum(m.GetWhy().String(), "MIGRATION_"), Enum(m.GetPhase().String(), "MIGRATION_")),
		kv("reason", m.GetReason()), kv("back_out", m.GetBackOutReason()))
}
