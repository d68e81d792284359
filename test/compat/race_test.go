//go:build race

package compat_test

// raceEnabled reports whether the tests run with -race; the binaries under
// test are then built with -race too (catching races in the manager and the
// worker, and sharing the build cache of `go test -race ./...`).
const raceEnabled = true
