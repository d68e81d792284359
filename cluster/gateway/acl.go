package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ACLConfig configures the ACL methods (docs/design/security.md, "ACL
// tokens"). Who may call what is checked before the gateway, by the
// interceptors of cluster/acl; the gateway stores the tokens.
type ACLConfig struct {
	// Enabled: the manager runs with --acl. Off, every Acl* method answers
	// FailedPrecondition, and nothing is blanked in what is read.
	Enabled bool
	// ResetFile is the bootstrap reset file (<data dir>/acl-bootstrap-reset):
	// a bootstrap after the first is accepted when this file on the
	// manager that answers holds the cluster's current bootstrap index,
	// as Nomad's acl-bootstrap-reset. Removed after a successful
	// bootstrap. Empty: no reset.
	ResetFile string
}

// ACL limits.
const (
	// maxTokenTTL bounds AclTokenCreate's ttl_ms: ten years.
	maxTokenTTL = 10 * 365 * 24 * time.Hour
	// maxTokens bounds the tokens of a cluster (they share one record).
	maxTokens = 1000
	// bootstrapTokenName is the name of the token AclBootstrap makes.
	bootstrapTokenName = "bootstrap"
)

// errACLOff answers the Acl* methods on a manager without --acl.
var errACLOff = status.Error(codes.FailedPrecondition, "ACLs are off on this manager: start every manager of the cluster with --acl")

// AclBootstrap creates the cluster's first management token and answers
// it with its secret. FailedPrecondition if ACLs are off, or if the
// cluster was bootstrapped already and the reset file does not hold its
// bootstrap index (the message says what to write where).
func (s *Server) AclBootstrap(ctx context.Context, _ *managerpb.AclBootstrapRequest) (*managerpb.AclToken, error) {
	if !s.cfg.ACL.Enabled {
		return nil, errACLOff
	}
	var out *managerpb.AclToken
	var resetUsed bool
	err := s.writeACL(ctx, func(cur *internalpb.AclRecord) (*internalpb.AclRecord, *internalpb.AuditIntent, error) {
		if idx := cur.GetBootstrapIndex(); idx > 0 {
			if err := s.checkBootstrapReset(idx); err != nil {
				return nil, nil, err
			}
			resetUsed = true
		}
		tok, rec, err := s.newToken(bootstrapTokenName, acl.RoleManagement, 0)
		if err != nil {
			return nil, nil, err
		}
		rec.Token.Bootstrap, tok.Bootstrap = true, true
		next := proto.Clone(cur).(*internalpb.AclRecord)
		next.BootstrapIndex++
		next.Tokens = append(next.Tokens, rec)
		out = tok
		return next, auditIntent(ctx, "acl.bootstrap", map[string]string{"accessor_id": tok.GetAccessorId(),
			"bootstrap_index": fmt.Sprint(next.BootstrapIndex), "peer": callerPeer(ctx)}), nil
	})
	if err != nil {
		return nil, err
	}
	if resetUsed {
		if err := os.Remove(s.cfg.ACL.ResetFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("remove the ACL bootstrap reset file", "path", s.cfg.ACL.ResetFile, "error", err)
		}
	}
	s.log.Info("acl bootstrapped", "token", out.GetAccessorId(), "reset", resetUsed, "peer", callerPeer(ctx))
	return out, nil
}

// checkBootstrapReset accepts a further bootstrap when the reset file
// holds idx, the cluster's current bootstrap index.
func (s *Server) checkBootstrapReset(idx uint64) error {
	refuse := func(why string) error {
		where := "no reset file is configured on this manager"
		if s.cfg.ACL.ResetFile != "" {
			where = fmt.Sprintf("to bootstrap again, write %d into %s on this manager and retry", idx, s.cfg.ACL.ResetFile)
		}
		return status.Errorf(codes.FailedPrecondition, "ACLs are already bootstrapped (reset index %d)%s; %s", idx, why, where)
	}
	if s.cfg.ACL.ResetFile == "" {
		return refuse("")
	}
	b, err := os.ReadFile(s.cfg.ACL.ResetFile)
	if errors.Is(err, os.ErrNotExist) {
		return refuse("")
	}
	if err != nil {
		return refuse(fmt.Sprintf(": the reset file cannot be read (%v)", err))
	}
	got, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || got != idx {
		return refuse(fmt.Sprintf(": the reset file holds %q, not %d", strings.TrimSpace(string(b)), idx))
	}
	return nil
}

// AclTokenCreate creates a token and answers it with its secret, shown
// this once. InvalidArgument for a bad name, role or ttl_ms;
// ResourceExhausted past maxTokens.
func (s *Server) AclTokenCreate(ctx context.Context, in *managerpb.AclTokenCreateRequest) (*managerpb.AclToken, error) {
	if !s.cfg.ACL.Enabled {
		return nil, errACLOff
	}
	if err := checkText("name", in.GetName(), maxNameLen); err != nil {
		return nil, err
	}
	role, err := acl.ParseRole(in.GetRole())
	if err != nil {
		return nil, invalid("role", "%v", err)
	}
	ttl := time.Duration(in.GetTtlMs()) * time.Millisecond
	if in.GetTtlMs() < 0 || ttl > maxTokenTTL {
		return nil, invalid("ttl_ms", "%d must be 0 (never expires) or a positive number of milliseconds up to %d (ten years)", in.GetTtlMs(), maxTokenTTL.Milliseconds())
	}
	var out *managerpb.AclToken
	err = s.writeACL(ctx, func(cur *internalpb.AclRecord) (*internalpb.AclRecord, *internalpb.AuditIntent, error) {
		if len(cur.GetTokens()) >= maxTokens {
			return nil, nil, status.Errorf(codes.ResourceExhausted, "the cluster has %d ACL tokens, the most it keeps: revoke some first", len(cur.GetTokens()))
		}
		tok, rec, err := s.newToken(in.GetName(), role, ttl)
		if err != nil {
			return nil, nil, err
		}
		next := proto.Clone(cur).(*internalpb.AclRecord)
		next.Tokens = append(next.Tokens, rec)
		out = tok
		return next, auditIntent(ctx, "acl.token_create", map[string]string{"accessor_id": tok.GetAccessorId(),
			"name": tok.GetName(), "role": tok.GetRole(), "ttl_ms": fmt.Sprint(in.GetTtlMs())}), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("acl token created", "token", out.GetAccessorId(), "name", out.GetName(), "role", out.GetRole(), "by", identity.NameOf(ctx))
	return out, nil
}

// AclTokenList answers every token without secrets, in accessor-id
// order, read after the barrier.
func (s *Server) AclTokenList(ctx context.Context, _ *managerpb.AclTokenListRequest) (*managerpb.AclTokenListResponse, error) {
	if !s.cfg.ACL.Enabled {
		return nil, errACLOff
	}
	rec, err := s.readACL(ctx)
	if err != nil {
		return nil, err
	}
	resp := &managerpb.AclTokenListResponse{BootstrapIndex: rec.GetBootstrapIndex()}
	for _, t := range rec.GetTokens() {
		resp.Tokens = append(resp.Tokens, publicToken(t))
	}
	slices.SortFunc(resp.Tokens, func(a, b *managerpb.AclToken) int { return strings.Compare(a.GetAccessorId(), b.GetAccessorId()) })
	return resp, nil
}

// AclTokenRevoke deletes a token: every manager refuses it once its
// replica applies the change. NotFound for an unknown accessor id;
// FailedPrecondition for the last management token that has not expired
// (which would leave only the bootstrap reset).
func (s *Server) AclTokenRevoke(ctx context.Context, in *managerpb.AclTokenRevokeRequest) (*emptypb.Empty, error) {
	if !s.cfg.ACL.Enabled {
		return nil, errACLOff
	}
	id := in.GetAccessorId()
	if err := checkText("accessor_id", id, maxNameLen); err != nil {
		return nil, err
	}
	now := s.cfg.Clock()
	err := s.writeACL(ctx, func(cur *internalpb.AclRecord) (*internalpb.AclRecord, *internalpb.AuditIntent, error) {
		i := slices.IndexFunc(cur.GetTokens(), func(t *internalpb.AclTokenRecord) bool { return t.GetToken().GetAccessorId() == id })
		if i < 0 {
			return nil, nil, status.Errorf(codes.NotFound, "ACL token %q not found", id)
		}
		next := proto.Clone(cur).(*internalpb.AclRecord)
		next.Tokens = slices.Delete(next.Tokens, i, i+1)
		if isLiveManagement(cur.GetTokens()[i], now) && !slices.ContainsFunc(next.GetTokens(), func(t *internalpb.AclTokenRecord) bool { return isLiveManagement(t, now) }) {
			return nil, nil, status.Errorf(codes.FailedPrecondition, "ACL token %q is the last management token: create another first (revoking it would leave the cluster to the bootstrap reset)", id)
		}
		return next, auditIntent(ctx, "acl.token_revoke", map[string]string{"accessor_id": id,
			"name": cur.GetTokens()[i].GetToken().GetName()}), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("acl token revoked", "token", id, "by", identity.NameOf(ctx))
	return &emptypb.Empty{}, nil
}

// AclTokenSelf answers the caller's own token, without its secret.
func (s *Server) AclTokenSelf(ctx context.Context, _ *managerpb.AclTokenSelfRequest) (*managerpb.AclToken, error) {
	if !s.cfg.ACL.Enabled {
		return nil, errACLOff
	}
	c, ok := identity.From(ctx)
	if !ok || c.TokenID == "" {
		return nil, status.Error(codes.Unauthenticated, "the call carries no ACL token")
	}
	rec, err := s.readACL(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range rec.GetTokens() {
		if t.GetToken().GetAccessorId() == c.TokenID {
			return publicToken(t), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "ACL token %q not found (revoked?)", c.TokenID)
}

func isLiveManagement(t *internalpb.AclTokenRecord, now time.Time) bool {
	exp := t.GetToken().GetExpireTime()
	return t.GetToken().GetRole() == string(acl.RoleManagement) && (exp == nil || now.Before(exp.AsTime()))
}

// publicToken is a stored token as answered: no secret, no hash.
func publicToken(t *internalpb.AclTokenRecord) *managerpb.AclToken {
	p := proto.Clone(t.GetToken()).(*managerpb.AclToken)
	p.SecretId = ""
	return p
}

// newToken makes a token: the answer (with its secret) and the record to
// store (with the secret's hash only).
func (s *Server) newToken(name string, role acl.Role, ttl time.Duration) (*managerpb.AclToken, *internalpb.AclTokenRecord, error) {
	secret, err := acl.NewSecret()
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "make a token secret: %v", err)
	}
	now := s.cfg.Clock()
	pub := &managerpb.AclToken{AccessorId: newUUID(), Name: name, Role: string(role), CreateTime: timestamppb.New(now)}
	if ttl > 0 {
		pub.ExpireTime = timestamppb.New(now.Add(ttl))
	}
	rec := &internalpb.AclTokenRecord{Token: proto.Clone(pub).(*managerpb.AclToken), SecretHash: acl.HashSecret(secret)}
	pub.SecretId = secret
	return pub, rec, nil
}

// readACL reads the ACL record after the barrier (an empty one before the
// first bootstrap).
func (s *Server) readACL(ctx context.Context) (*internalpb.AclRecord, error) {
	rec, _, err := s.loadACL(ctx)
	return rec, err
}

func (s *Server) loadACL(ctx context.Context) (*internalpb.AclRecord, persistence.Seq, error) {
	var rec *internalpb.AclRecord
	var seq persistence.Seq
	err := s.view(ctx, func(r *persistence.Reader) error {
		var err error
		rec, seq, err = r.ACL()
		if errors.Is(err, persistence.ErrNotFound) {
			rec, err = &internalpb.AclRecord{}, nil
		}
		return err
	})
	if err != nil {
		return nil, 0, toStatus(err)
	}
	return rec, seq, nil
}

// aclDecision decides an ACL write on the record read after the barrier:
// the next record, or the error to answer.
// The audit intent is written in the same append (docs/design/audit.md).
type aclDecision func(cur *internalpb.AclRecord) (*internalpb.AclRecord, *internalpb.AuditIntent, error)

// writeACL reads the ACL record after the barrier, decides, and appends
// the decision expecting the sequence read, deciding again after a
// conflict (as pool writes do, pools.go).
func (s *Server) writeACL(ctx context.Context, decide aclDecision) error {
	if s.cfg.Journal == nil {
		return status.Error(codes.Unimplemented, "this manager was started without a journal for ACL writes")
	}
	if err := s.requireLeader(ctx); err != nil {
		return err
	}
	for range poolAttempts {
		cur, seq, err := s.loadACL(ctx)
		if err != nil {
			return err
		}
		next, audit, err := decide(cur)
		if err != nil {
			return err
		}
		reqID := newRequestID()
		next.RecentRequests = actors.RememberRequest(next.GetRecentRequests(), reqID)
		_, fail := actors.CommitAudited(s.cfg.Journal, persistence.ACLKey, seq, reqID, next, nil, s.cfg.Clock(), poolAppendTimeout, audit)
		switch {
		case fail == nil:
			return nil
		case fail.GetCode() == errorpb.Code_ABORTED:
			continue
		case ctx.Err() != nil:
			return toStatus(ctx.Err())
		}
		return replyStatus(fail, nil)
	}
	return status.Errorf(codes.Aborted, "the ACL tokens were changed by other requests %d times while this one was decided; retry", poolAttempts)
}

// callerPeer is the caller's address for logs.
func callerPeer(ctx context.Context) string {
	c, _ := identity.From(ctx)
	return c.Peer
}

// blankSlotTokens blanks the registration tokens of slots for a caller
// whose role may not operate them (a read token): tokens register workers.
func (s *Server) blankSlotTokens(ctx context.Context, nodes []*managerpb.ClusterNode) {
	if acl.CallerMay(ctx, s.cfg.ACL.Enabled, acl.AccessOperate) {
		return
	}
	for _, n := range nodes {
		n.Token = ""
	}
}
