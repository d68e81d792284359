package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Limits of AppendAuditEntry (docs/design/audit.md).
const (
	// maxAuditNameLen bounds source and kind, in bytes.
	maxAuditNameLen = 128
	// maxAuditPayload bounds a caller-supplied payload, in bytes.
	maxAuditPayload = 64 << 10
	// defaultAuditList and maxAuditList are ListAuditEntries' page sizes.
	defaultAuditList = 1000
	maxAuditList     = 10000
)

// auditIntent is the audit entry the manager writes for an accepted call
// of kind by the caller of ctx: fields are the ids of what changed
// (encoding/json sorts the keys, so equal calls give equal payloads).
// Never put a secret (a token, a credential) in fields.
func auditIntent(ctx context.Context, kind string, fields map[string]string) *internalpb.AuditIntent {
	b, err := json.Marshal(fields)
	if err != nil { // a map of strings always encodes
		b = []byte("{}")
	}
	return &internalpb.AuditIntent{Source: auditchain.SourceManager, Kind: kind, Who: identity.NameOf(ctx), Payload: string(b)}
}

// jobAudit is the audit intent of an API job command (nil for reads).
func jobAudit(ctx context.Context, id string, cmd *internalpb.JobCommand) *internalpb.AuditIntent {
	f := map[string]string{"job_id": id}
	var kind string
	switch c := cmd.GetCmd().(type) {
	case *internalpb.JobCommand_Create:
		kind = "job.create"
	case *internalpb.JobCommand_Update:
		kind = "job.update"
	case *internalpb.JobCommand_Delete:
		kind = "job.delete"
	case *internalpb.JobCommand_Complete:
		kind = "job.complete"
	case *internalpb.JobCommand_Start:
		kind, f["role"], f["node_id"] = "job.start", c.Start.GetRole(), c.Start.GetNodeId()
	case *internalpb.JobCommand_Stop:
		kind, f["role"], f["node_id"] = "job.stop", c.Stop.GetRole(), c.Stop.GetNodeId()
	case *internalpb.JobCommand_BeginMigration:
		kind, f["role"], f["target_node_id"] = "job.migrate", c.BeginMigration.GetRole(), c.BeginMigration.GetRequestedNodeId()
	case *internalpb.JobCommand_AbortMigration:
		kind, f["source_role"], f["target_role"] = "job.abort_migration", c.AbortMigration.GetSourceRole(), c.AbortMigration.GetTargetRole()
	default:
		return nil
	}
	return auditIntent(ctx, kind, f)
}

// nodeAudit is the audit intent of an API node command (nil for reads).
// A slot's registration token is never recorded.
func nodeAudit(ctx context.Context, id string, cmd *internalpb.NodeCommand) *internalpb.AuditIntent {
	f := map[string]string{"node_id": id}
	var kind string
	switch c := cmd.GetCmd().(type) {
	case *internalpb.NodeCommand_RegisterSlot:
		kind = "slot.register"
	case *internalpb.NodeCommand_Deregister:
		kind = "slot.deregister"
	case *internalpb.NodeCommand_MemberRegister:
		kind = "node.member_register"
	case *internalpb.NodeCommand_Terminate:
		kind = "node.terminate"
	case *internalpb.NodeCommand_CreateMock:
		kind = "node.create_mock"
	case *internalpb.NodeCommand_CreateCloud:
		kind = "node.create_cloud"
	case *internalpb.NodeCommand_StopOrphan:
		kind, f["job_id"], f["role"] = "node.stop_orphan", c.StopOrphan.GetJobId(), c.StopOrphan.GetRole()
	case *internalpb.NodeCommand_UpdatePhysical:
		kind = "node.update_physical"
	case *internalpb.NodeCommand_SetScheduling:
		kind, f["state"] = "node.set_scheduling", c.SetScheduling.GetState().String()
	default:
		return nil
	}
	return auditIntent(ctx, kind, f)
}

// bundleAudit is the audit intent of an API bundle command (nil for reads).
func bundleAudit(ctx context.Context, id string, cmd *internalpb.BundleCommand) *internalpb.AuditIntent {
	f := map[string]string{"bundle_id": id}
	var kind string
	switch c := cmd.GetCmd().(type) {
	case *internalpb.BundleCommand_Create:
		kind = "bundle.create"
	case *internalpb.BundleCommand_Update:
		kind = "bundle.update"
	case *internalpb.BundleCommand_Delete:
		kind = "bundle.delete"
	case *internalpb.BundleCommand_SetDormant:
		kind = "bundle.set_dormant"
		f["replica_index"], f["job_name"], f["dormant"] = fmt.Sprint(c.SetDormant.GetReplicaIndex()), c.SetDormant.GetJobName(), fmt.Sprint(c.SetDormant.GetDormant())
	default:
		return nil
	}
	return auditIntent(ctx, kind, f)
}

// poolAudit is the audit intent of a pool change: created (seq 0),
// updated, or deleted (next nil).
func poolAudit(ctx context.Context, name string, seq persistence.Seq, deleted bool) *internalpb.AuditIntent {
	kind := "pool.update"
	switch {
	case deleted:
		kind = "pool.delete"
	case seq == 0:
		kind = "pool.create"
	}
	return auditIntent(ctx, kind, map[string]string{"pool": name})
}

// checkAuditName checks AppendAuditEntry's source or kind: 1 to 128 bytes
// of letters, digits and ._:/- .
func checkAuditName(field, s string) error {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	if len(s) > maxAuditNameLen {
		return invalid(field, "is %d bytes long, the limit is %d", len(s), maxAuditNameLen)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/-", r))
	}); i >= 0 {
		return invalid(field, "contains %q at byte %d: only letters, digits and . _ : / - are allowed", s[i:i+1], i)
	}
	return nil
}

// validateAppendAudit checks an AppendAuditEntry request.
func validateAppendAudit(in *managerpb.AppendAuditEntryRequest) error {
	if err := checkAuditName("source", in.GetSource()); err != nil {
		return err
	}
	if in.GetSource() == auditchain.SourceManager {
		return invalid("source", "%q is reserved for the entries the manager writes itself", auditchain.SourceManager)
	}
	if err := checkAuditName("kind", in.GetKind()); err != nil {
		return err
	}
	switch p := in.GetPayload(); {
	case len(p) > maxAuditPayload:
		return invalid("payload", "is %d bytes long, the limit is %d", len(p), maxAuditPayload)
	case !utf8.ValidString(p):
		return invalid("payload", "is not valid UTF-8")
	}
	return nil
}

// AppendAuditEntry appends a caller-supplied entry to the audit log,
// alone, and returns it as stored (seq, timestamp, who, hashes assigned
// by the manager). InvalidArgument for a bad source, kind or payload
// (validateAppendAudit); Unavailable with no Raft leader; Unimplemented on
// a gateway without a journal.
func (s *Server) AppendAuditEntry(ctx context.Context, in *managerpb.AppendAuditEntryRequest) (*managerpb.AuditLogEntry, error) {
	if err := validateAppendAudit(in); err != nil {
		return nil, err
	}
	if s.cfg.Journal == nil {
		return nil, status.Error(codes.Unimplemented, "this manager was started without a journal for audit writes")
	}
	if err := s.requireLeader(ctx); err != nil {
		return nil, err
	}
	audit := &internalpb.AuditIntent{Source: in.GetSource(), Kind: in.GetKind(), Who: identity.NameOf(ctx), Payload: in.GetPayload()}
	res, err := s.cfg.Journal.Append(ctx, "", 0, persistence.Change{At: s.cfg.Clock(), Audit: audit})
	if err != nil {
		return nil, toStatus(err)
	}
	// Append returns once the entry is applied here: read it locally.
	var e *managerpb.AuditLogEntry
	err = s.cfg.Store.View(func(r *persistence.Reader) error {
		return r.AuditEntries(uint64(res.Seq), uint64(res.Seq), 1, func(got *managerpb.AuditLogEntry) error { e = got; return nil })
	})
	if err == nil && e == nil {
		err = fmt.Errorf("audit entry %d was appended but is no longer stored (retention dropped it): %w", res.Seq, persistence.ErrNotFound)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("audit entry appended", "seq", e.GetSeq(), "source", e.GetSource(), "kind", e.GetKind(), "who", e.GetWho())
	return e, nil
}

// ListAuditEntries returns the audit entries with from_seq <= seq <= to_seq
// (to_seq 0: the newest), oldest first, at most limit (0: 1000, at most
// 10000) and at most the reply budget in bytes (paging.go; at least one),
// with the log's bounds: a caller wanting more asks again from the last
// seq + 1 until it reaches head_seq. InvalidArgument for negative seqs or
// to_seq below from_seq.
func (s *Server) ListAuditEntries(ctx context.Context, in *managerpb.ListAuditEntriesRequest) (*managerpb.ListAuditEntriesResponse, error) {
	from, to := in.GetFromSeq(), in.GetToSeq()
	switch {
	case from < 0:
		return nil, invalid("from_seq", "is %d, must not be negative", from)
	case to < 0:
		return nil, invalid("to_seq", "is %d, must not be negative", to)
	case to > 0 && to < from:
		return nil, invalid("to_seq", "is %d, below from_seq %d", to, from)
	}
	limit := int(min(in.GetLimit(), maxAuditList))
	if limit == 0 {
		limit = defaultAuditList
	}
	pg := &pager{kind: "audit", budget: s.listBudget()}
	resp := &managerpb.ListAuditEntriesResponse{}
	err := s.view(ctx, func(r *persistence.Reader) error {
		first, head, err := r.AuditBounds()
		if err != nil {
			return err
		}
		resp.FirstSeq, resp.HeadSeq = int64(first), int64(head)
		return pg.done(r.AuditEntries(uint64(from), uint64(to), limit, func(e *managerpb.AuditLogEntry) error {
			if !pg.fits("", e) {
				return errPageFull
			}
			resp.Entries = append(resp.Entries, e)
			return nil
		}))
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}
