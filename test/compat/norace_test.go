//go:build !race

package compat_test

// raceEnabled reports whether the tests run with -race (see race_test.go).
const raceEnabled = false
