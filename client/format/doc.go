// Package format renders the Norsk Manager's public protocol messages as
// short, human-readable text: one line per event of the event stream
// (EventLine), and the fields that operator tools print for jobs, nodes and
// ports (Service, HistoryEntry, Instances, NodeAddress, Age, Tags, …). It is
// shared by norsk-ctl and by the manager's --dev mode, so both print the
// event stream the same way.
//
// Every function is pure: it reads the message it is given and returns a
// string, with no I/O and no clock of its own (Age takes "now" as an
// argument). Messages are never modified. A nil message, or an absent field,
// is valid input and renders as the function's documented placeholder
// (usually "-"), because the protobuf getters are nil-safe. Maps are rendered
// in key order, so the output is deterministic.
//
// The output is meant for people, not programs: it may change between
// releases. Tools that parse output should use protojson instead.
//
// This package imports the generated protocol packages and the standard
// library only; it must not import package client, gRPC or anything of the
// manager itself.
package format
