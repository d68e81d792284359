package persistence

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// auditScan carries the audit chain's check through Verify's key scan,
// which reads au/ keys in seq order.
type auditScan struct {
	v auditchain.Verifier
	// broken is set at the first entry that fails: the entries after it
	// are counted, not checked again (one change is one damage).
	broken     bool
	count      int
	first, max uint64
}

// checkAuditKey checks one stored audit entry: its key, that it decodes,
// and the chain up to it (auditchain.Verifier). The first entry that does
// not verify is reported by seq, as "audit entry N: …".
func (r *VerifyReport) checkAuditKey(as *auditScan, key, v []byte) {
	c := &r.Store
	bad := func(reason string, err error) {
		r.damage(&DamageError{Path: c.Dir, Reason: reason, Err: err})
		as.broken = true
	}
	seq := auditSeqOf(key)
	if seq == 0 {
		bad(fmt.Sprintf("key %q: an audit key that is not 8 bytes of seq", printable(key)), nil)
		return
	}
	as.count++
	if as.first == 0 {
		as.first = seq
	}
	as.max = seq
	if as.broken {
		return
	}
	e := &managerpb.AuditLogEntry{}
	if err := proto.Unmarshal(v, e); err != nil {
		bad(fmt.Sprintf("audit entry %d does not decode", seq), err)
		return
	}
	if uint64(e.GetSeq()) != seq {
		bad(fmt.Sprintf("audit entry %d is stored under seq %d", e.GetSeq(), seq), nil)
		return
	}
	if err := as.v.Next(e); err != nil {
		bad(fmt.Sprintf("audit log: %v", err), nil)
	}
}

// crossCheckAudit compares the audit entries found with meta/au_head and
// meta/au_dropped: entries missing at either end are damage the chain
// alone cannot show.
func (r *VerifyReport) crossCheckAudit(sc *storeScan) {
	c, as := &r.Store, &sc.audit
	c.AuditEntries, c.AuditFirst, c.AuditHead = as.count, as.first, as.max
	head, dropped := sc.meta[string(keyAuditHead)], sc.meta[string(keyAuditDropped)]
	wantFirst := max(dropped, 1)
	switch {
	case head == 0 && as.count > 0:
		r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("%d audit entries are stored but meta/au_head is 0", as.count)})
	case head > 0 && (as.first != wantFirst || as.max != head || uint64(as.count) != head-wantFirst+1):
		r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("the audit log should hold entries %d-%d (%d), it holds %d from %d to %d",
			wantFirst, head, head-wantFirst+1, as.count, as.first, as.max)})
	}
}
