// Package auditchain defines the audit log's hash chain: the canonical
// encoding of an AuditLogEntry, its SHA-256 hash, and a streaming Verifier
// that recomputes a chain and names the first entry that does not match
// (docs/design/audit.md). The store (persistence) hashes with it when it
// appends an entry, norsk-ctl audit verify and norsk-manager verify check
// with it; an outside tool can reimplement it from the encoding below.
//
// It depends only on the standard library and the public API types
// (proto/managerpb): it must not import persistence, cluster or actors.
package auditchain
