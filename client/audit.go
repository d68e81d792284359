package client

import (
	"context"
	"fmt"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// auditPage is how many entries AuditEntries and VerifyAudit ask for per
// call (the manager's maximum is 10000).
const auditPage = 1000

// AppendAuditEntry appends a caller-supplied entry to the manager's
// hash-chained audit log and returns it as stored: the manager assigns
// seq, timestamp_ms, who (this caller's token name) and the hashes
// (docs/design/audit.md). source and kind are 1-128 bytes of letters,
// digits and ._:/- (source "manager" is reserved), payload at most 64 KiB:
// codes.InvalidArgument names the field otherwise. Not retried: a call
// that fails with codes.Unavailable may or may not have appended.
func (m *NorskManager) AppendAuditEntry(ctx context.Context, source, kind, payload string) (*managerpb.AuditLogEntry, error) {
	return unary(ctx, m, "AppendAuditEntry", &managerpb.AppendAuditEntryRequest{Source: source, Kind: kind, Payload: payload}, m.api.AppendAuditEntry)
}

// ListAuditEntries returns one page of audit entries (req's seq range and
// limit, oldest first) with the log's bounds. codes.InvalidArgument for a
// bad range.
func (m *NorskManager) ListAuditEntries(ctx context.Context, req *managerpb.ListAuditEntriesRequest) (*managerpb.ListAuditEntriesResponse, error) {
	if req == nil {
		req = &managerpb.ListAuditEntriesRequest{}
	}
	return unary(ctx, m, "ListAuditEntries", req, m.api.ListAuditEntries)
}

// AuditEntries calls fn with every audit entry from seq from (0: the
// oldest retained) to the newest, oldest first, paging through
// ListAuditEntries; it stops after limit entries (0: no limit) or at fn's
// error, which it returns. It returns the log's bounds as of its first
// page.
func (m *NorskManager) AuditEntries(ctx context.Context, from int64, limit int, fn func(*managerpb.AuditLogEntry) error) (first, head int64, err error) {
	n := 0
	for page := 0; ; page++ {
		size := uint32(auditPage)
		if limit > 0 {
			size = uint32(min(limit-n, auditPage))
		}
		resp, err := m.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{FromSeq: from, Limit: size})
		if err != nil {
			return first, head, err
		}
		if page == 0 {
			first, head = resp.GetFirstSeq(), resp.GetHeadSeq()
		}
		for _, e := range resp.GetEntries() {
			if err := fn(e); err != nil {
				return first, head, err
			}
			n++
		}
		// A page may hold fewer than asked (the manager's reply budget):
		// the log is read to its head, not to a short page.
		es := resp.GetEntries()
		if len(es) == 0 || es[len(es)-1].GetSeq() >= resp.GetHeadSeq() || limit > 0 && n >= limit {
			return first, head, nil
		}
		from = resp.GetEntries()[len(resp.GetEntries())-1].GetSeq() + 1
	}
}

// AuditVerifyResult is what VerifyAudit checked.
type AuditVerifyResult struct {
	// Entries is the number of entries verified (an anchor included);
	// First and Last their seqs (0 with none).
	Entries     int
	First, Last int64
	// Anchored is true when the log starts at an anchor (retention
	// dropped older entries).
	Anchored bool
}

// VerifyAudit reads the whole audit log and recomputes its hash chain
// (auditchain.Verifier). A chain that does not verify is a
// *auditchain.MismatchError naming the first entry that does not match by
// seq; a log that ends before the head the manager reported when the check
// began is one too (entries missing at the end). Other errors are the
// calls'.
func (m *NorskManager) VerifyAudit(ctx context.Context) (AuditVerifyResult, error) {
	var v auditchain.Verifier
	var res AuditVerifyResult
	_, head, err := m.AuditEntries(ctx, 0, 0, func(e *managerpb.AuditLogEntry) error {
		if res.Entries == 0 {
			res.First, res.Anchored = e.GetSeq(), e.GetKind() == auditchain.KindAnchor
		}
		if err := v.Next(e); err != nil {
			return err
		}
		res.Entries, res.Last = res.Entries+1, e.GetSeq()
		return nil
	})
	if err != nil {
		return res, err
	}
	if res.Last < head {
		return res, &auditchain.MismatchError{Seq: res.Last + 1, Reason: fmt.Sprintf("missing: the manager reported head %d, the log ends at %d", head, res.Last)}
	}
	return res, nil
}
