// Package ops holds the process tests of the operator procedures of
// docs/design/backup.md: online snapshots under write load from a single
// manager and from a cluster follower, restores into new data dirs
// started as managers (workers' jobs re-adopted, event-stream clients
// reset), and the recovery of the survivor of a cluster that lost two of
// its three managers for good. Real norsk-manager and norsk-ctl processes
// on loopback, through test/testproc.
//
// The tests take minutes: they are skipped under -short.
package ops
