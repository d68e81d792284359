package main

import "github.com/spf13/cobra"

// addSubcommands adds the commands that work on a stopped manager's data
// dir (each in its own file) to the daemon's root command: verify
// (docs/design/persistence.md), restore and recover
// (docs/design/backup.md), and tls, which makes certificates
// (docs/design/security.md).
func addSubcommands(root *cobra.Command) {
	root.AddCommand(newVerifyCommand(), newRestoreCommand(), newRecoverCommand(), newTLSCommand())
}
