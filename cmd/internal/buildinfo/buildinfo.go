package buildinfo

import (
	"runtime/debug"
)

// DefaultVersion is Version when the build does not set it.
const DefaultVersion = "0.1.0-dev"

// Version is the release version. Release builds set it at link time:
//
//	go build -ldflags "-X github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo.Version=1.2.3" ./cmd/...
//
// It is a var only for -ldflags -X; nothing else may change it.
var Version = DefaultVersion

// revisionLength is how many hex digits of the VCS revision String shows.
const revisionLength = 12

// String returns Version plus, when the build recorded one (go build in a
// Git checkout, without -buildvcs=false), "+" and the first 12 hex digits
// of the VCS revision, and "-dirty" if the working tree had local changes:
// "0.1.0-dev+0123456789ab", "1.2.3+0123456789ab-dirty", or just
// "0.1.0-dev".
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	return format(Version, info.Settings)
}

// format renders version with the VCS settings of a build.
func format(version string, settings []debug.BuildSetting) string {
	var rev, dirty string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return version
	}
	if len(rev) > revisionLength {
		rev = rev[:revisionLength]
	}
	return version + "+" + rev + dirty
}
