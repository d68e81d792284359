// Package simfleet runs a simulated fleet of workers in one process: N
// real worker agents (package worker: registration of a cluster slot,
// hello with capacity and zone, the dial-back NodeControllerStream,
// health, provision_job → job_started, stop_job → job_stopped) whose
// runtime runs nothing. It is for the placement benchmark (go run
// ./test/bench placement) and the HA tests that need hundreds of nodes
// without hundreds of processes.
//
// The fleet also checks what no real worker can see: every start of a
// (job, role) it receives while that (job, role) already runs on any of
// its nodes is recorded as a violation of ARCHITECTURE §7 (a job role runs
// at most once).
//
// It speaks to the manager only through the wire protocol (as the worker
// package does) and must not import the manager's packages (actors,
// cluster, persistence).
package simfleet
