package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// Exit codes of norsk-manager verify (in its --help; 2 is a usage error,
// as for every command).
const (
	verifyExitDamaged     = 1
	verifyExitUncheckable = 3
)

func newVerifyCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check a stopped manager's data dir for damage",
		Long: `verify checks the data dir of a stopped norsk-manager offline and prints what
it checked:

  marker      the data dir's norsk-manager.json (format, mode, store id)
  fsm store   every table's checksums, then every key and value (value-log
              checksums), every job/node/bundle record, the event log against
              its bounds, the secondary indexes against the records, and the
              applied index, and the audit log's hash chain (recomputed; the
              first entry that does not match is named by seq)
  raft store  (a cluster member's data dir) every Raft log entry, no gaps,
              the terms, and every Raft snapshot read whole (checksums)

It runs the checks a start runs (every table, and the write-ahead and
value logs for damage followed by more data) and then reads the stores
without writing anything into the data dir: not even the lock file (a data
dir a running manager holds is refused: "data dir in use by another
manager"), the zero-length logs a crash can leave (listed; they hold no
data, and the next start removes them), or the write-ahead logs of a store
that was not closed cleanly (they are read through a temporary copy, in
$TMPDIR, which needs space up to their size). A store that fails the
checks of a start is not opened at all.

Exit codes:
  0  the data dir is sound
  1  damage was found: each damaged file or record is printed, with what to
     do (restore a snapshot with norsk-manager restore; for a cluster member,
     rebuild it from the cluster: see the README)
  2  usage error
  3  the data dir could not be checked: in use by a running manager,
     missing, not a norsk-manager data dir, or of another format version`,
		Example: "  norsk-manager verify --data-dir /var/lib/norsk-manager",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("verify: unexpected argument %q: give the data dir with --data-dir", args[0])
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usagef("--data-dir: the data dir to check is required")
			}
			return runVerify(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), dataDir)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "the data dir of the stopped manager to check")
	return cmd
}

// runVerify checks dataDir and prints the report to out.
func runVerify(ctx context.Context, out, errOut io.Writer, dataDir string) error {
	logger := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	r, err := persistence.Verify(ctx, dataDir, logger)
	if err != nil {
		return &exitError{code: verifyExitUncheckable, err: fmt.Errorf("cannot check %s: %w", dataDir, err)}
	}
	printReport(out, r, time.Since(start))
	if !r.Sound() {
		return &exitError{code: verifyExitDamaged, err: fmt.Errorf("data dir %s is damaged (%d problem(s)). %s",
			dataDir, len(r.Damage)+r.MoreDamage, persistence.DamageAdvice(r.Marker.Mode))}
	}
	return nil
}

// printReport prints what was checked and found.
func printReport(w io.Writer, r *persistence.VerifyReport, took time.Duration) {
	p := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "data dir %s\n", r.DataDir)
	m := r.Marker
	mode := string(m.Mode)
	if mode == "" {
		mode = "not recorded"
	}
	p("marker", "format %d, mode %s, store %s, created %s", m.Format, mode, m.StoreID, m.CreatedAt.Format(time.RFC3339))
	s := r.Store
	p("fsm store", "%s: %d table(s), %s, checksums verified; %d keys read", s.Dir, s.Tables, mib(s.TableBytes), s.Keys)
	p("", "%s; %d deleted", entityCounts(s.Entities), s.Deleted)
	events := "no events"
	if s.Events > 0 {
		events = fmt.Sprintf("%d events (%d-%d)", s.Events, s.EventFirst, s.EventHead)
	}
	p("", "%s; applied index %d; %d secondary-index entries", events, s.Applied, s.IndexEntries)
	audit := "no audit entries"
	if s.AuditEntries > 0 {
		audit = fmt.Sprintf("audit log %d-%d (%d entries), hash chain recomputed", s.AuditFirst, s.AuditHead, s.AuditEntries)
	}
	p("", "%s", audit)
	if rc := r.Raft; rc != nil {
		log := "empty log"
		if rc.Entries > 0 {
			log = fmt.Sprintf("log %d-%d (%d entries)", rc.First, rc.Last, rc.Entries)
		}
		p("raft store", "%s: %d table(s), %s, checksums verified; %s", rc.Dir, rc.Tables, mib(rc.TableBytes), log)
		vote := "no vote"
		if rc.LastVoteCand != "" {
			vote = fmt.Sprintf("voted for %s in term %d", rc.LastVoteCand, rc.LastVoteTerm)
		}
		p("", "current term %d, %s", rc.CurrentTerm, vote)
		for _, sn := range rc.Snapshots {
			p("", "snapshot %s: index %d, term %d, %s, %d records, checksums verified", sn.ID, sn.Index, sn.Term, mib(sn.Size), sn.Records)
		}
	}
	for _, path := range r.EmptyLogs {
		p("empty log", "%s (a zero-length log a crash left; it holds no data, and the next start removes it)", path)
	}
	for _, d := range r.Damage {
		p("DAMAGED", "%v", d)
	}
	if r.MoreDamage > 0 {
		p("DAMAGED", "… and %d more", r.MoreDamage)
	}
	result := "sound"
	if !r.Sound() {
		result = "DAMAGED"
	}
	fmt.Fprintf(w, "result: %s (checked in %s)\n", result, took.Round(time.Millisecond))
}

func entityCounts(m map[string]int) string {
	if len(m) == 0 {
		return "no entities"
	}
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
