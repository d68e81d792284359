// Package replication runs hashicorp/raft under the manager's store: the
// Raft log lives in a badger store of its own, the FSM is the persistence
// FSM, and RaftJournal implements persistence.Journal over it, so grains
// are the same in one manager and in a cluster (docs/design/ha.md).
//
// Writes: on the leader an append is one raft.Apply; on a follower it is
// forwarded to the leader's internal Cluster/Append RPC and the follower
// waits until its own FSM has applied the entry, so what it acknowledged
// it can read. Reads: Barrier waits until the local FSM has applied the
// leader's commit index, read after the leader confirmed its leadership
// (read index), so a read reflects every write acknowledged before it.
package replication
