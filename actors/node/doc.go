// Package node implements the node grain: one actor per node (cluster
// slots, mock nodes; cloud nodes later) that owns the node's record and
// lifecycle (STARTING → STARTED → STOPPING → STOPPED), and — while the node
// has a worker — the dial-back session to it, as a child actor holding the
// Worker/NodeControllerStream gRPC stream.
//
// Session rules (docs/design/worker-sessions.md):
//   - The grain dials the worker's registered address; the worker speaks
//     first with hello. A cluster worker must prove its node credential
//     (proto/workerauth); a host that merely answers on the address gets no
//     session. Mock-pool workers hold no credential and are not checked.
//   - Before answering the hello, the grain makes the session's epoch
//     durable; epochs strictly increase per node across manager restarts.
//   - The node counts as STARTED (node_started, physical_node_connected)
//     at the session's first health ping, not at hello: a worker that
//     answers hello and then stays silent keeps being lost. Then the grain
//     adopts what the hello listed (running_jobs) and ends the instances its
//     jobs place on the node that the worker no longer runs. A manager
//     restart therefore never restarts a job.
//   - A lost session is re-dialled with capped exponential backoff. A node
//     without a session for LostTimeout is declared stopped (NodeStopping
//     with the reason of the last failure), and the grain keeps re-dialling
//     at the capped interval so that a worker that comes back is taken back.
package node
