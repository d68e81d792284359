// Package pki creates and loads the certificates that secure a Norsk
// Manager cluster's links with TLS (docs/design/security.md).
//
// It owns:
//
//   - a small certificate authority for operators who have no PKI of their
//     own, in the shape of `nomad tls ca create` / `nomad tls cert create`:
//     ECDSA P-256 keys and X.509 certificates made with the standard
//     library (CreateCA, CA.Issue), certificates for three roles — server
//     (a manager's API), client (an operator, norsk-ctl) and worker (the
//     worker agent) — and the writing of their PEM files, keys mode 0600,
//     never over an existing file (WriteNew);
//   - loading a certificate pair and a CA bundle from files and re-reading
//     them when they change or when asked (Reloader, used on SIGHUP), so
//     certificates are renewed without a restart, with the expiry of the
//     loaded certificate for a metric and a warning ahead of time;
//   - the tls.Config of each side of a link (Reloader.ServerConfig,
//     Reloader.ClientConfig), which always use the pair and CA last loaded.
//
// It knows nothing of gRPC, actors or the store: callers turn the
// tls.Config into transport credentials. Only cmd/ reads flags and
// signals; this package takes file names and is told to reload.
package pki
