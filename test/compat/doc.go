// Package compat holds the wire-compatibility tests of the manager against
// the published client package @norskvideo/norsk-api@1.0.384 (MIT): the
// package's own generated classes and grpc-js client, run by node, talk to a
// real norsk-manager with a real worker (compat.mjs), and its generated code
// is compared field by field with our protos (fields.mjs). See README.md.
//
// The package has no non-test code. Its tests import only the generated
// proto packages and build the binaries under cmd/ with `go build`; nothing
// may import this package.
package compat
