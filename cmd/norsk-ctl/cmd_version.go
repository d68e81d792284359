package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newVersionCommand builds "norsk-ctl version".
func newVersionCommand() *cobra.Command {
	return withExitCodes(&cobra.Command{
		Use:   "version",
		Short: "Print the version of norsk-ctl and of the manager",
		Long: `Print the version of norsk-ctl (also the version a worker started with
--mode=worker reports), then ask the manager at --manager-url for its own
version and the Norsk API level it implements. The text output names the
manager that answered (one of the --manager-url list).

A version reads like "0.1.0-dev+0123456789ab": the release version, then "+"
and the Git revision the binary was built from (with "-dirty" if the tree
had local changes) when the build recorded one. In text output the
norsk-ctl line is printed even when the manager cannot be reached; the exit
code then says why the manager's part is missing.`,
		Example: `  norsk-ctl version
  norsk-ctl version -o json`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			clientVersion := buildinfo.String()
			if !e.jsonOut {
				fmt.Fprintf(e.out, "norsk-ctl: %s (%s)\n", clientVersion, runtime.Version())
			}
			v, from, err := m.VersionFrom(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeVersionJSON(e, clientVersion, v)
			}
			api := v.GetVersion()
			_, err = fmt.Fprintf(e.out, "manager:   %s (%s) at %s\nNorsk API: %d.%d.%d%s\n",
				v.GetManagerVersion(), v.GetGoVersion(), ctlAnsweredBy(from, m.Addresses()),
				api.GetMajorVersion(), api.GetMinorVersion(), api.GetBuildNumber(), ctlVersionLabel(api.GetBranchName(), api.GetLabel()))
			return err
		}),
	})
}

// ctlAnsweredBy names the manager that answered: its address, else (gRPC
// did not say) the list asked, labelled as such when it has several.
func ctlAnsweredBy(from string, addrs []string) string {
	switch {
	case from != "":
		return from
	case len(addrs) == 1:
		return addrs[0]
	}
	return "one of " + strings.Join(addrs, ",")
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
