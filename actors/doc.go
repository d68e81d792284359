// Package actors holds the grain machinery shared by every grain kind: the
// Router through which the gateway and other grains reach a grain by (kind,
// identity), the local Host that activates grains on demand (one
// supervisor per grain, the stateful actor as its child), reply helpers and
// the live-node registry.
//
// Grain kinds live in sub-packages (actors/job, actors/node). They depend
// on persistence (journal and reads) and proto, never on cluster/ or the
// gateway (ARCHITECTURE §8).
//
// Grain messages are proto messages (internalpb.JobCommand, NodeCommand, …)
// so that the HA manager can carry them across processes unchanged; every
// command has a request id and grains answer a repeated id from their
// record, because cluster requests are at-least-once.
package actors
