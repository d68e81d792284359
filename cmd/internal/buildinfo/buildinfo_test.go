package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"no vcs", "0.1.0-dev", nil, "0.1.0-dev"},
		{"revision", "0.1.0-dev", []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}},
			"0.1.0-dev+0123456789ab"},
		{"dirty", "1.2.3", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: rev}},
			"1.2.3+0123456789ab-dirty"},
		{"short revision", "1.2.3", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc1234"}}, "1.2.3+abc1234"},
		{"modified without revision", "1.2.3", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "1.2.3"},
		{"other settings", "1.2.3", []debug.BuildSetting{{Key: "GOOS", Value: "linux"}}, "1.2.3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format(tc.version, tc.settings); got != tc.want {
				t.Errorf("format = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestString_StartsWithVersion(t *testing.T) {
	if got := String(); !strings.HasPrefix(got, Version) {
		t.Errorf("String() = %q, want it to start with Version %q", got, Version)
	}
	if Version != DefaultVersion {
		t.Errorf("Version = %q without -ldflags, want %q", Version, DefaultVersion)
	}
}
