package noderesources

import (
	"runtime"
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// The architecture names a node is shown with and a job's architecture
// constraint is matched against after NormalizeArchitecture: the names
// the OCI provider uses (uname -m's).
const (
	ArchX86_64  = "x86_64"
	ArchAarch64 = "aarch64"
)

// NormalizeArchitecture maps the spellings of an architecture a job or a
// create request may use to ArchX86_64 or ArchAarch64 ("amd64", "x86-64",
// "x64", "x86" → x86_64; "arm64", "arm" → aarch64; any case, spaces
// trimmed). An unknown name comes back lower-cased and trimmed, so that it
// matches no node rather than a wrong one; "" stays "".
func NormalizeArchitecture(a string) string {
	a = strings.ToLower(strings.TrimSpace(a))
	switch a {
	case "x86_64", "x86-64", "amd64", "x64", "x86":
		return ArchX86_64
	case "aarch64", "arm64", "arm":
		return ArchAarch64
	}
	return a
}

// ArchitectureName is the name of a protocol Architecture: ArchX86_64 or
// ArchAarch64 ("" for a value this build does not know).
func ArchitectureName(a commonpb.Architecture) string {
	switch a {
	case commonpb.Architecture_X86_64:
		return ArchX86_64
	case commonpb.Architecture_AARCH_64:
		return ArchAarch64
	}
	return ""
}

// HostArchitecture is the protocol Architecture of the running binary
// (runtime.GOARCH: arm64 → AARCH_64, amd64 → X86_64), and false for an
// architecture the protocol has no name for (the worker then reports
// none, and a job constrained on architecture is not placed on it).
func HostArchitecture() (commonpb.Architecture, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return commonpb.Architecture_X86_64, true
	case "arm64":
		return commonpb.Architecture_AARCH_64, true
	}
	return 0, false
}
