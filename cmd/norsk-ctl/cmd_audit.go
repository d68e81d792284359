package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newAuditCommand builds "norsk-ctl audit".
func newAuditCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "audit",
		Short: "List, append to and verify the hash-chained audit log",
		Long: `The manager writes an audit entry for every change it accepts through the API
(jobs, bundles, pools, nodes, slots): who (the token's name, "anonymous"
without ACLs), what (kind and a small JSON payload of ids), when. Each entry
carries the hash of the one before (prev_hash) and its own (hash), so a
changed, removed or inserted entry breaks the chain. The manager keeps the
newest --audit-retention entries (default 100000); the oldest retained one is
then an anchor ("audit.anchor") holding the hash of the last dropped entry.
See docs/design/audit.md for the exact hash encoding.`,
	})
	cmd.AddCommand(newAuditListCommand(), newAuditAppendCommand(), newAuditVerifyCommand())
	return cmd
}

// newAuditListCommand builds "audit list".
func newAuditListCommand() *cobra.Command {
	var from int64
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List audit entries, oldest first",
		Long: `List audit entries from seq --from (default: the oldest retained), at most
--limit of them (default 100; 0: all). -o json prints one JSON object of
{"entries": [...]} with every field, the hashes included.`,
		Example: "  norsk-ctl audit list --from 1200 --limit 50\n  norsk-ctl audit list --limit 0 -o json",
		Args:    ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			if from < 0 {
				return ctlUsagef("--from %d: must not be negative", from)
			}
			if limit < 0 {
				return ctlUsagef("--limit %d: must not be negative (0 lists all)", limit)
			}
			resp := &managerpb.ListAuditEntriesResponse{}
			first, head, err := m.AuditEntries(ctx, from, limit, func(en *managerpb.AuditLogEntry) error {
				resp.Entries = append(resp.Entries, en)
				return nil
			})
			if err != nil {
				return err
			}
			resp.FirstSeq, resp.HeadSeq = first, head
			if e.jsonOut {
				return e.printJSON(resp)
			}
			if len(resp.GetEntries()) == 0 {
				_, err := fmt.Fprintf(e.out, "no audit entries (log %s)\n", auditBounds(first, head))
				return err
			}
			rows := make([][]string, 0, len(resp.GetEntries()))
			for _, en := range resp.GetEntries() {
				rows = append(rows, []string{strconv.FormatInt(en.GetSeq(), 10),
					time.UnixMilli(int64(en.GetTimestampMs())).UTC().Format(time.RFC3339Nano),
					en.GetWho(), en.GetSource(), en.GetKind(), en.GetPayload()})
			}
			return ctlTable(e.out, []string{"SEQ", "TIME", "WHO", "SOURCE", "KIND", "PAYLOAD"}, rows)
		}),
	}
	cmd.Flags().Int64Var(&from, "from", 0, "first seq to list (0: the oldest retained)")
	cmd.Flags().IntVar(&limit, "limit", 100, "most entries to list (0: all)")
	return cmd
}

func auditBounds(first, head int64) string {
	if head == 0 {
		return "empty"
	}
	return fmt.Sprintf("holds %d-%d", first, head)
}

// newAuditAppendCommand builds "audit append".
func newAuditAppendCommand() *cobra.Command {
	var source, kind, payload string
	cmd := &cobra.Command{
		Use:   "append --source SOURCE --kind KIND [--payload TEXT]",
		Short: "Append an entry of your own to the audit log",
		Long: `Append an entry to the audit log, for actions that do not go through another
API call (the newer SDK's appendAuditEntry). The manager assigns seq, time,
who and the hashes. --source and --kind: 1-128 of letters, digits and
. _ : / - ("manager" is reserved); --payload: at most 64 KiB, opaque.`,
		Example: `  norsk-ctl audit append --source runbook --kind origin.switch --payload '{"to":"backup"}'`,
		Args:    ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			en, err := m.AppendAuditEntry(ctx, source, kind, payload)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(en)
			}
			_, err = fmt.Fprintf(e.out, "appended audit entry %d (hash %s)\n", en.GetSeq(), en.GetHash())
			return err
		}),
	}
	cmd.Flags().StringVar(&source, "source", "", "who or what the entry comes from (required)")
	cmd.Flags().StringVar(&kind, "kind", "", "what happened (required)")
	cmd.Flags().StringVar(&payload, "payload", "", "details, opaque to the manager")
	return cmd
}

// newAuditVerifyCommand builds "audit verify".
func newAuditVerifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Read the whole audit log and recompute its hash chain",
		Long: `Read every retained audit entry and recompute the chain here, on the client:
each entry's hash over its content, and that its prev_hash is the hash of the
entry before. It prints how many entries verified, or names the first entry
that does not match (exit 1). A log that starts at an anchor verifies from
it. For a stopped manager's data dir, "norsk-manager verify" checks the same
chain offline.`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			res, err := m.VerifyAudit(ctx)
			var me *auditchain.MismatchError
			if errors.As(err, &me) {
				return fmt.Errorf("audit log does NOT verify: %w (%d entries before it verified)", me, res.Entries)
			}
			if err != nil {
				return err
			}
			if res.Entries == 0 {
				_, err := fmt.Fprintln(e.out, "audit log is empty: nothing to verify")
				return err
			}
			from := ""
			if res.Anchored {
				from = " from the anchor"
			}
			_, err = fmt.Fprintf(e.out, "audit log verified: %d entries, seq %d-%d%s\n", res.Entries, res.First, res.Last, from)
			return err
		}),
	}
}
