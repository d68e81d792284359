package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
)

// recoverOptions are the flags of "norsk-manager recover".
type recoverOptions struct {
	dataDir   string
	name      string
	raftAddr  string
	advertise string
	force     bool
	logLevel  string
}

// newRecoverCommand builds "norsk-manager recover".
func newRecoverCommand() *cobra.Command {
	o := &recoverOptions{}
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR --name NAME",
		Short: "Turn a stopped survivor of a cluster that lost its majority for good into a one-manager cluster",
		Long: `recover is for a cluster that lost the majority of its managers for good (their
machines or disks are gone): the survivors cannot elect a leader, so nothing
can be written, and nothing will change that. Run it, with the manager
stopped, on the data dir of one survivor — the one that was most up to date
(highest applied index in "norsk-ctl cluster members"). It rewrites that
manager's Raft configuration to itself alone, as Consul's peers.json and
hashicorp/raft's RecoverCluster do, keeping all its data: every entry in its
Raft log is applied, including entries it had received but not yet applied.
Then start it with its usual flags: it serves as a cluster of one, and other
managers join it with fresh data dirs and --join.

What it cannot keep: writes the lost majority had committed but this manager
never received. Entries in its log that were never committed are applied too
(their clients were told the outcome was unknown). Event-stream clients get a
stream_reset: the event log restarts far beyond every earlier index.

Never start the lost managers again on their old data dirs: they still hold
the old configuration, two of them elect a leader of it, and that leader
takes this manager back as its follower, rolling back what it wrote alone.
Wipe their data dirs first and join them as new managers.

recover refuses a data dir in use by a running manager, a single manager's
data dir, a --name that is not a server of the cluster's configuration, and,
unless --force, a cluster in which another server's Raft address answers
(the majority may not be lost).

Exit codes: 0 recovered; 1 refused or failed (nothing changed when refused); 2 usage error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRecover(cmd.OutOrStdout(), o, cmd.Flags().Changed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "data dir of the stopped surviving manager (required)")
	f.StringVar(&o.name, "name", "", "the manager's --name, a server of the cluster's configuration (default: the host name)")
	f.StringVar(&o.raftAddr, "raft-addr", "", "the manager's --raft-addr, if it changes (default: keep its address in the configuration)")
	f.StringVar(&o.advertise, "advertise", "", "the manager's --advertise, if its Raft address changes")
	f.BoolVar(&o.force, "force", false, "recover even though another server's Raft address answers (only if what answers is not that manager)")
	f.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q: recover takes only flags (see --help)", args[0])
		}
		return nil
	}
	return cmd
}

// runRecover recovers; changed reports whether a flag was given.
func runRecover(out io.Writer, o *recoverOptions, changed func(string) bool) error {
	log, err := newLogger(o.logLevel, "text")
	if err != nil {
		return err
	}
	if o.dataDir == "" {
		return usagef("--data-dir is required: the data dir of the stopped surviving manager")
	}
	name := o.name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return usagef("--name: no host name to default to: %v", err)
		}
	}
	addr := ""
	if changed("raft-addr") || changed("advertise") {
		ra := o.raftAddr
		if ra == "" {
			ra = "0.0.0.0:7948"
		}
		if addr, err = advertisedRaftAddr(ra, o.advertise); err != nil {
			return err
		}
	}
	if _, err := os.Stat(o.dataDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recover: data dir %s does not exist: give the --data-dir of the stopped surviving manager; nothing was changed", o.dataDir)
	}
	if _, err := os.Stat(filepath.Join(o.dataDir, "raft")); err != nil {
		return fmt.Errorf("recover: data dir %s has no Raft state (%v): it is not a cluster member's data dir", o.dataDir, err)
	}
	scfg := persistence.DefaultConfig(o.dataDir)
	scfg.Mode, scfg.GCInterval, scfg.Logger = persistence.ModeCluster, 0, log
	store, err := persistence.Open(scfg)
	switch {
	case errors.Is(err, persistence.ErrWrongMode):
		return fmt.Errorf("recover: data dir %s holds a single manager's state: recover is for members of a cluster; nothing was changed", o.dataDir)
	case err != nil:
		return fmt.Errorf("recover: %w (is a manager still running on this data dir? stop it first); nothing was changed", err)
	}
	defer store.Close()
	logs, err := persistence.OpenRaftStore(persistence.RaftStoreConfig{Dir: filepath.Join(o.dataDir, "raft"), SyncWrites: true, Logger: log})
	if err != nil {
		return fmt.Errorf("recover: %w (is a manager still running on this data dir? stop it first); nothing was changed", err)
	}
	defer logs.Close()
	conf, err := replication.ReadConfiguration(filepath.Join(o.dataDir, "raft"), name, store, logs, log)
	if err != nil {
		return fmt.Errorf("recover: %w; nothing was changed", err)
	}
	if !isServer(conf.Servers, name) {
		return fmt.Errorf("recover: %s is not a server in the Raft configuration (servers: %s): give the --name this manager ran with; nothing was changed",
			name, describeServers(conf.Servers))
	}
	if len(conf.Servers) == 1 && (addr == "" || string(conf.Servers[0].Address) == addr) {
		// Recovering it again would only restart the event log once more
		// (another stream_reset for every client) and change nothing else.
		fmt.Fprintf(out, "%s: %s (Raft address %s) is already a cluster of one; nothing was changed\n", o.dataDir, name, conf.Servers[0].Address)
		return nil
	}
	if !o.force {
		if s, ok := answeringServer(conf.Servers, name); ok {
			return fmt.Errorf("recover: %s (Raft address %s) answers: the cluster may still have its majority, and recovering this manager "+
				"would split it in two; recover only a cluster that lost its majority for good (stop every other manager first, "+
				"or pass --force if what answers there is not that manager); nothing was changed", s.ID, s.Address)
		}
	}
	res, err := replication.Recover(replication.RecoverConfig{Dir: filepath.Join(o.dataDir, "raft"), Name: name, Addr: addr,
		Store: store, LogStore: logs, Logger: log})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	var lost []string
	for _, s := range res.Previous {
		if string(s.ID) != name {
			lost = append(lost, string(s.ID))
		}
	}
	slices.Sort(lost)
	fmt.Fprintf(out, "recovered %s: %s (Raft address %s) is now a cluster of one\n", o.dataDir, name, res.Addr)
	fmt.Fprintf(out, "  removed        %s\n", orNone(strings.Join(lost, ", ")))
	fmt.Fprintf(out, "  applied index  %d (%d log entries applied by the recovery)\n", res.AppliedAfter, res.AppliedAfter-res.AppliedBefore)
	fmt.Fprintf(out, "  event log      restarts after index %d: clients resuming from an earlier index get a stream reset\n", res.EventBase)
	fmt.Fprintf(out, "start it with its usual flags; add managers with fresh data dirs and --join.\n")
	if len(lost) > 0 {
		fmt.Fprintf(out, "never start %s again on their old data dirs.\n", strings.Join(lost, ", "))
	}
	return nil
}

// answeringServer returns a server of servers other than self whose Raft
// address accepts a connection within a second.
func answeringServer(servers []raft.Server, self string) (raft.Server, bool) {
	for _, s := range servers {
		if string(s.ID) == self {
			continue
		}
		conn, err := net.DialTimeout("tcp", string(s.Address), time.Second)
		if err == nil {
			conn.Close()
			return s, true
		}
	}
	return raft.Server{}, false
}

// isServer reports whether name is the id of one of servers.
func isServer(servers []raft.Server, name string) bool {
	for _, s := range servers {
		if string(s.ID) == name {
			return true
		}
	}
	return false
}

// describeServers lists servers as "m1 at 10.0.0.1:7948, m2 at …" (or
// "none").
func describeServers(servers []raft.Server) string {
	var parts []string
	for _, s := range servers {
		parts = append(parts, fmt.Sprintf("%s at %s", s.ID, s.Address))
	}
	return orNone(strings.Join(parts, ", "))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
