package docker

import (
	"fmt"
	"strings"

	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// exitState is how a container's run ended.
type exitState struct {
	Code  int
	OOM   bool   // killed by the kernel's OOM killer
	Error string // the engine's error for the container, if any
	Gone  bool   // the container no longer exists
}

func (st exitState) success() bool { return st.Code == 0 && !st.OOM && !st.Gone && st.Error == "" }

// String describes the exit for job_info and failure reasons.
func (st exitState) String() string {
	var parts []string
	switch {
	case st.Gone:
		return "container removed"
	case st.OOM:
		parts = append(parts, fmt.Sprintf("was killed for running out of memory (OOM), exit code %d", st.Code))
	case st.Code > 128 && st.Code < 160:
		parts = append(parts, fmt.Sprintf("exited with code %d (killed by %s)", st.Code, signalName(st.Code-128)))
	default:
		parts = append(parts, fmt.Sprintf("exited with code %d", st.Code))
	}
	if st.Error != "" {
		parts = append(parts, "engine error: "+st.Error)
	}
	return strings.Join(parts, "; ")
}

func signalName(n int) string {
	names := map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
	if s, ok := names[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}

// exit returns st as the supervisor sees it; last is the run's last
// output line ("" if none).
func (st exitState) exit(last string) supervisor.Exit {
	ex := supervisor.Exit{Success: st.success(), Text: st.String()}
	if last != "" {
		ex.Detail = fmt.Sprintf("; last output: %q", last)
	}
	return ex
}
