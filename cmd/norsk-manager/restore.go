package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
)

// restoreOptions are the flags of "norsk-manager restore".
type restoreOptions struct {
	from, dataDir   string
	bootstrapExpect int
	name, raftAddr  string
	advertise       string
	logLevel        string
	aclReset        bool
}

// newRestoreCommand builds "norsk-manager restore".
func newRestoreCommand() *cobra.Command {
	o := &restoreOptions{}
	cmd := &cobra.Command{
		Use:   "restore --from FILE --data-dir NEW_DIR [--acl-reset] [--bootstrap-expect 1 --name NAME --raft-addr ADDR]",
		Short: "Make a new data dir holding exactly a backup (norsk-ctl operator snapshot save)",
		Long: `restore writes a new data dir holding exactly the state in a backup file made by
"norsk-ctl operator snapshot save", for a manager to start on.

It checks the whole file first (format version, structure, SHA-256) and
refuses, writing nothing, a truncated or altered file and a --data-dir that is
not empty: it never mixes a backup with other state. The restored dir is built
aside and moved into place with its marker file last, so a crash leaves either
no data dir or the complete one.

Without cluster flags the dir is a single manager's. With --bootstrap-expect 1
(and --name, --raft-addr, --advertise as the manager will be started with) it
is the first manager of a new cluster: it starts as a cluster of one holding
the backup, and further managers join it with --join and fresh data dirs (not
--bootstrap-expect). A backup of a cluster may be restored as a single manager
and the reverse.

The restored store is a new history: its event log restarts far beyond every
index the backed-up managers could have reached, so an event-stream client
resuming from any earlier index gets a stream_reset and a fresh snapshot, never
events under indexes it has already seen. Workers' jobs that the backup knows
are adopted when the manager dials their workers; jobs created after the
backup are unknown to it. Node credentials are part of the backup: keep backup
files as private as the data dir.

ACL tokens are part of the backup too: every token it holds is valid again,
also one revoked after the backup was taken; restore says how many it brings
back. --acl-reset drops them all instead, and the record of the bootstrap, so
that the restored manager needs a new "norsk-ctl acl bootstrap" (the reset is
in the audit log). Use it when the backup is older than a revocation, or a
token may have leaked (docs/design/backup.md, "ACL tokens").

Exit codes: 0 restored; 1 failed (bad file, non-empty dir, I/O); 2 usage error.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRestore(cmd.OutOrStdout(), o, cmd.Flags().Changed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "backup file to restore (required)")
	f.StringVar(&o.dataDir, "data-dir", "", "the new data dir: must not exist or be empty (required)")
	f.IntVar(&o.bootstrapExpect, "bootstrap-expect", 0, "1: make it the first manager of a new cluster (0: a single manager)")
	f.StringVar(&o.name, "name", "", "with --bootstrap-expect 1: the manager's --name (default: the host name)")
	f.StringVar(&o.raftAddr, "raft-addr", "0.0.0.0:7948", "with --bootstrap-expect 1: the manager's --raft-addr")
	f.StringVar(&o.advertise, "advertise", "", "with --bootstrap-expect 1: the manager's --advertise (required when --raft-addr binds 0.0.0.0)")
	f.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	f.BoolVar(&o.aclReset, "acl-reset", false, "drop every ACL token in the backup and its bootstrap: the restored manager needs a new acl bootstrap")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q: restore takes only flags (see --help)", args[0])
		}
		return nil
	}
	return cmd
}

// seedTarget is the Raft identity of a restored first manager.
type seedTarget struct{ name, addr string }

// check validates the flags; it returns the Raft identity when the dir is
// to be a cluster member's.
func (o *restoreOptions) check(changed func(string) bool) (*seedTarget, error) {
	switch {
	case o.from == "":
		return nil, usagef("--from is required: the backup file to restore")
	case o.dataDir == "":
		return nil, usagef("--data-dir is required: the new data dir (it must not exist or be empty)")
	case o.bootstrapExpect < 0 || o.bootstrapExpect > 1:
		return nil, usagef("--bootstrap-expect %d: a restored manager starts as a cluster of one (--bootstrap-expect 1); "+
			"the others join it with --join and fresh data dirs", o.bootstrapExpect)
	}
	if o.bootstrapExpect == 0 {
		for _, fl := range []string{"name", "raft-addr", "advertise"} {
			if changed(fl) {
				return nil, usagef("--%s is a cluster flag: give --bootstrap-expect 1 to restore the first manager of a new cluster", fl)
			}
		}
		return nil, nil
	}
	name := o.name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, usagef("--name: no host name to default to: %v", err)
		}
		name = h
	}
	if err := checkManagerName(name); err != nil {
		return nil, err
	}
	addr, err := advertisedRaftAddr(o.raftAddr, o.advertise)
	if err != nil {
		return nil, err
	}
	return &seedTarget{name: name, addr: addr}, nil
}

// advertisedRaftAddr is the Raft address a manager started with these
// flags advertises (as the agent computes it).
func advertisedRaftAddr(raftAddr, advertise string) (string, error) {
	host, port, err := net.SplitHostPort(raftAddr)
	if err != nil || !validPort(port) {
		return "", usagef("--raft-addr %q: want host:port", raftAddr)
	}
	if advertise != "" {
		if err := checkAdvertise(advertise); err != nil {
			return "", usagef("--advertise %q: %v", advertise, err)
		}
		return net.JoinHostPort(strings.Trim(advertise, "[]"), port), nil
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", usagef("--raft-addr %s binds every interface: give --advertise (the address other managers reach this one at)", raftAddr)
	}
	return raftAddr, nil
}

// runRestore restores; changed reports whether a flag was given.
func runRestore(out io.Writer, o *restoreOptions, changed func(string) bool) error {
	log, err := newLogger(o.logLevel, "text")
	if err != nil {
		return err
	}
	target, err := o.check(changed)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(o.from); err == nil && fi.IsDir() {
		return usagef("--from %s is a directory, not a snapshot file: give the file \"norsk-ctl operator snapshot save FILE\" wrote; nothing was changed", o.from)
	}
	cfg := persistence.RestoreDirConfig{From: o.from, Dir: o.dataDir, Mode: persistence.ModeSingle, ACLReset: o.aclReset, Logger: log}
	if target != nil {
		cfg.Mode = persistence.ModeCluster
		cfg.Seed = func(s *persistence.Store, dir string) error {
			return replication.Seed(replication.SeedConfig{Dir: filepath.Join(dir, "raft"), Name: target.name, Addr: target.addr, Store: s, Logger: log})
		}
	}
	res, err := persistence.RestoreDataDir(cfg)
	if err != nil {
		return err
	}
	m := res.Meta
	fmt.Fprintf(out, "restored backup %s into %s\n", o.from, o.dataDir)
	fmt.Fprintf(out, "  applied index  %d (taken %s", m.AppliedIndex, m.CreatedAt.Format(time.RFC3339))
	if m.ManagerVersion != "" {
		fmt.Fprintf(out, " by manager %s", m.ManagerVersion)
	}
	if m.StoreID != "" {
		fmt.Fprintf(out, " from store %s", m.StoreID)
	}
	fmt.Fprintf(out, ")\n  keys           %d\n", m.Keys)
	fmt.Fprintf(out, "  event log      restarts after index %d: clients resuming from an earlier index get a stream reset\n", res.EventBase)
	fmt.Fprintf(out, "  ACL tokens     %s\n", aclLine(res))
	acl := aclFlag(res)
	if target == nil {
		fmt.Fprintf(out, "  mode           a single manager\nstart it with:\n  norsk-manager --data-dir %s%s\n", o.dataDir, acl)
		return nil
	}
	fmt.Fprintf(out, "  mode           the first manager of a new cluster: %s, Raft address %s\n", target.name, target.addr)
	fmt.Fprintf(out, "start it with its cluster flags, for example:\n  norsk-manager --data-dir %s --name %s --bootstrap-expect 1%s ...\n", o.dataDir, target.name, acl)
	fmt.Fprintf(out, "then add managers with fresh data dirs and --join (not --bootstrap-expect)\n")
	return nil
}

// aclFlag is " --acl" for the start command restore suggests when the
// backup's cluster had ACLs (bootstrapped, or reset with --acl-reset), ""
// otherwise: a manager started on such a data dir without --acl serves
// every call unauthenticated (it only logs an ERROR), so the suggested
// command must not leave the flag out.
func aclFlag(res persistence.RestoreDirResult) string {
	if res.ACLReset || res.ACL.BootstrapIndex != 0 || res.ACL.Tokens != 0 {
		return " --acl"
	}
	return ""
}

// aclLine says what the restore did with the backup's ACL tokens.
func aclLine(res persistence.RestoreDirResult) string {
	a := res.ACL
	switch {
	case res.ACLReset:
		return fmt.Sprintf("%d dropped (--acl-reset), with the bootstrap (index %d): start the manager with --acl and run "+
			"norsk-ctl acl bootstrap for a new management token before anyone else reaches it; the reset is in the audit log (%s)",
			a.Tokens, a.BootstrapIndex, persistence.ACLResetKind)
	case a.BootstrapIndex == 0 && a.Tokens == 0:
		return "none (ACLs were never bootstrapped in the backup)"
	}
	valid := a.Tokens - a.Expired
	expired := ""
	if a.Expired > 0 {
		expired = fmt.Sprintf(" (and %d expired)", a.Expired)
	}
	return fmt.Sprintf("%d valid again%s, bootstrap index %d: every token in the backup authenticates, also one revoked after "+
		"it was taken; revoke those with norsk-ctl acl token revoke, or restore again with --acl-reset to drop them all", valid, expired, a.BootstrapIndex)
}
