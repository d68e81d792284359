// Package proto holds the protocol sources of norsk-manager and generates
// their Go code into the sub-packages commonpb, errorpb, managerpb, workerpb
// (the published norsk.api.* wire format of @norskvideo/norsk-api@1.0.384
// plus this project's additions) and internalpb (stored records, journal
// appends and grain commands).
//
// Regenerate with `go generate ./proto`; see generate.sh for the pinned
// generator versions.
package proto

//go:generate ./generate.sh
