package placement

import "github.com/prometheus/client_golang/prometheus"

// Results counted by norsk_manager_nodes_provisioned_total.
const (
	// ProvisionCreated: the node grain recorded a node the engine created
	// (its instance is being launched, or its mock worker dialled).
	ProvisionCreated = "created"
	// ProvisionFailed: the create was refused or not answered (a mock pool
	// that is empty, a provider not configured); sent again later.
	ProvisionFailed = "failed"
	// ProvisionReleased: an engine-created node was terminated after its
	// linger.
	ProvisionReleased = "released"
	// ProvisionGaveUp: an engine-created node still being created after
	// provisioner.CreateTimeout was terminated.
	ProvisionGaveUp = "gave_up"
)

// newProvisionedCounter is norsk_manager_nodes_provisioned_total{pool,
// tier, result}: the engine's creates and releases of nodes on this
// manager. A failed launch of a recorded node (a capacity error) shows as
// that node's node_stopping CREATE_FAILED and the offering's backoff in
// pool get, not here.
func newProvisionedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "norsk_manager_nodes_provisioned_total",
		Help: "Nodes the placement engine created or released on this manager, by pool, tier and result (created, failed, released, gave_up).",
	}, []string{"pool", "tier", "result"})
}

func (m *Metrics) countProvisioned(pool, tier, result string) {
	if m != nil {
		m.provisioned.WithLabelValues(pool, tier, result).Inc()
	}
}
