// Package clienttest provides an in-memory fake of the Norsk Manager's public
// gRPC API, and helpers to serve it on loopback, for tests of code that uses
// package client (the client itself, norsk-ctl, automation built on the
// event stream).
//
// The fake keeps jobs, nodes and cluster slots in memory with simplified
// semantics (no placement, no workers, no windows) and an event log numbered
// like the real manager's, with hooks to break streams, drop old log entries
// and inject errors. It is not a model of the manager: tests of the manager
// itself use the real one.
//
// Typical use:
//
//	fake := clienttest.NewManager(nil)
//	srv := clienttest.Serve(t, fake, "127.0.0.1:0")
//	m, err := client.Connect(ctx, client.Settings{URL: srv.Addr})
//	…
//	fake.BreakStreams(status.Error(codes.Unavailable, "failover"))
//
// It imports the generated protocol and gRPC only, never the manager's
// packages.
package clienttest
