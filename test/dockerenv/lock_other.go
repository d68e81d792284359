//go:build !unix

package dockerenv

// lockFile is a no-op where flock is unavailable: concurrent ProbeImage
// calls may then build the same tag twice, which is harmless.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
