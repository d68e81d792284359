package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ctlBuildVersion is this binary's version: the module version (or
// "(devel)") plus the VCS revision when the build recorded one.
func ctlBuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += "+" + rev + dirty
	}
	return v
}

// newVersionCommand builds "norsk-ctl version".
func newVersionCommand() *cobra.Command {
	return withExitCodes(&cobra.Command{
		Use:   "version",
		Short: "Print the version of norsk-ctl and of the manager",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			clientVersion := ctlBuildVersion()
			if !e.jsonOut {
				fmt.Fprintf(e.out, "norsk-ctl: %s (%s)\n", clientVersion, runtime.Version())
			}
			v, err := m.Version(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeVersionJSON(e, clientVersion, v)
			}
			api := v.GetVersion()
			_, err = fmt.Fprintf(e.out, "manager:   %s (%s) at %s\nNorsk API: %d.%d.%d%s\n",
				v.GetManagerVersion(), v.GetGoVersion(), e.url,
				api.GetMajorVersion(), api.GetMinorVersion(), api.GetBuildNumber(), ctlVersionLabel(api.GetBranchName(), api.GetLabel()))
			return err
		}),
	})
}

// ctlVersionLabel renders the optional branch and label of a Norsk version.
func ctlVersionLabel(branch, label string) string {
	s := ""
	if branch != "" {
		s += " branch " + branch
	}
	if label != "" {
		s += " (" + label + ")"
	}
	return s
}

// writeVersionJSON prints {"client": {...}, "manager": <VersionInfo>}.
func writeVersionJSON(e *ctlEnv, clientVersion string, v *managerpb.VersionInfo) error {
	manager, err := ctlJSON(v, "")
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(map[string]any{
		"client":  map[string]string{"version": clientVersion, "goVersion": runtime.Version()},
		"manager": json.RawMessage(manager),
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode version: %w", err)
	}
	_, err = fmt.Fprintf(e.out, "%s\n", out)
	return err
}
