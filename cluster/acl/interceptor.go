package acl

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// MetadataKey is the gRPC metadata key a token travels in, as
// "Bearer <secret>".
const MetadataKey = "authorization"

// TokenFinder finds a stored token by the SHA-256 of its secret.
type TokenFinder interface {
	// FindToken returns the token whose secret hashes to secretHash, or an
	// error wrapping persistence.ErrNotFound when there is none (never
	// created, or revoked). Called on every authenticated call: it must be
	// cheap and safe for concurrent use.
	FindToken(secretHash []byte) (*internalpb.AclTokenRecord, error)
}

// StoreTokens finds tokens in the local replica of store (no read
// barrier: a manager authenticates from what it has applied, so a
// revocation holds on it once its replica applies the revocation, within
// the replication lag).
func StoreTokens(store *persistence.Store) TokenFinder { return storeTokens{store} }

type storeTokens struct{ s *persistence.Store }

func (t storeTokens) FindToken(h []byte) (tok *internalpb.AclTokenRecord, err error) {
	err = t.s.View(func(r *persistence.Reader) error {
		tok, err = r.ACLTokenBySecretHash(h)
		return err
	})
	return tok, err
}

// Config configures an Authorizer.
type Config struct {
	// Enabled turns ACLs on (norsk-manager --acl): every method of the
	// Manager service then needs what the table says. Off, every call
	// passes and its caller is identity.Anonymous.
	Enabled bool
	// Tokens finds tokens; required when Enabled.
	Tokens TokenFinder
	// Clock returns the time expiry is checked against; nil: time.Now.
	Clock func() time.Time
	// Logger receives refusals (debug: no or unknown token; info: a valid
	// token refused by its role). Nil discards.
	Logger *slog.Logger
}

// Authorizer checks every API call (its interceptors) and sets the
// caller's identity in the call's context. Safe for concurrent use.
type Authorizer struct {
	cfg Config
}

// New returns an Authorizer; an error if ACLs are on without Tokens.
func New(cfg Config) (*Authorizer, error) {
	if cfg.Enabled && cfg.Tokens == nil {
		return nil, errors.New("acl: Config.Tokens is required with ACLs on")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{cfg: cfg}, nil
}

// Enabled reports whether ACLs are on.
func (a *Authorizer) Enabled() bool { return a.cfg.Enabled }

// UnaryInterceptor authorises each unary call before its handler runs;
// a refused call never reaches the handler, so it changes nothing.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.Authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authorises each streaming call before its handler
// runs, and gives the handler a stream whose Context carries the caller.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, tok, err := a.authorize(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if tok == nil {
			return handler(srv, &callerStream{ServerStream: ss, ctx: ctx})
		}
		return handler(srv, &recheckStream{callerStream: callerStream{ServerStream: ss, ctx: ctx}, a: a, tok: tok})
	}
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// Authorize checks a call of fullMethod made with ctx's metadata and
// returns ctx with its caller (identity.With). With ACLs off, or for a
// method that needs no token or is not of the Manager service, the caller
// is identity.Anonymous. Errors are gRPC statuses: Unauthenticated (no,
// malformed, unknown or expired token) or PermissionDenied (the token's
// role does not allow the method, naming the roles that do; or a Manager
// method missing from the table).
func (a *Authorizer) Authorize(ctx context.Context, fullMethod string) (context.Context, error) {
	ctx, _, err := a.authorize(ctx, fullMethod)
	return ctx, err
}

// authorize is Authorize that also returns the token the call was
// accepted with (nil when it needs none), for the stream interceptor's
// rechecks.
func (a *Authorizer) authorize(ctx context.Context, fullMethod string) (context.Context, *internalpb.AclTokenRecord, error) {
	who := identity.Caller{Name: identity.Anonymous, Peer: peerOf(ctx)}
	if !a.cfg.Enabled {
		return identity.With(ctx, who), nil, nil
	}
	need, inManager, known := MethodAccess(fullMethod)
	switch {
	case !inManager || need == AccessNone:
		return identity.With(ctx, who), nil, nil
	case !known:
		a.cfg.Logger.Error("call refused: method has no entry in the ACL table", "method", fullMethod, "peer", who.Peer)
		return nil, nil, status.Errorf(codes.PermissionDenied, "%s has no entry in the manager's ACL table: refused to every token (a bug: report it)", fullMethod)
	}
	tok, err := a.authenticate(ctx)
	if err != nil {
		a.cfg.Logger.Debug("call refused: not authenticated", "method", fullMethod, "peer", who.Peer, "error", err)
		return nil, nil, err
	}
	t := tok.GetToken()
	who.Name, who.TokenID, who.Role = t.GetName(), t.GetAccessorId(), t.GetRole()
	if !Role(t.GetRole()).Allows(need) {
		a.cfg.Logger.Info("call refused: role does not allow it", "method", fullMethod, "peer", who.Peer,
			"token", t.GetAccessorId(), "token_name", t.GetName(), "role", t.GetRole(), "needs", need.String())
		return nil, nil, status.Errorf(codes.PermissionDenied, "%s needs a token of role %s; token %q (%s) has role %q",
			shortMethod(fullMethod), orList(rolesAllowing(need)), t.GetName(), t.GetAccessorId(), t.GetRole())
	}
	return identity.With(ctx, who), tok, nil
}

// authenticate returns the token the call's metadata presents, or
// Unauthenticated saying why there is none.
func (a *Authorizer) authenticate(ctx context.Context) (*internalpb.AclTokenRecord, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch len(vals) {
	case 0:
		return nil, status.Error(codes.Unauthenticated, `this manager requires an ACL token: send "authorization: Bearer <secret>" metadata (norsk-ctl: NORSK_TOKEN or --token-file)`)
	case 1:
	default:
		return nil, status.Errorf(codes.Unauthenticated, "%d authorization metadata values; send exactly one token", len(vals))
	}
	secret, err := bearerSecret(vals[0])
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	h := HashSecret(secret)
	tok, err := a.cfg.Tokens.FindToken(h)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, status.Error(codes.Unauthenticated, "unknown ACL token (never created on this cluster, or revoked)")
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read ACL tokens: %v", err)
	}
	if !SameHash(tok.GetSecretHash(), h) {
		return nil, status.Error(codes.Unauthenticated, "unknown ACL token")
	}
	if err := a.checkExpiry(tok); err != nil {
		return nil, err
	}
	return tok, nil
}

// checkExpiry is Unauthenticated once tok has expired by the Clock.
func (a *Authorizer) checkExpiry(tok *internalpb.AclTokenRecord) error {
	if exp := tok.GetToken().GetExpireTime(); exp != nil && !a.cfg.Clock().Before(exp.AsTime()) {
		return status.Errorf(codes.Unauthenticated, "ACL token %q (%s) expired at %s",
			tok.GetToken().GetName(), tok.GetToken().GetAccessorId(), exp.AsTime().UTC().Format(time.RFC3339))
	}
	return nil
}

// peerOf is the caller's address and, with mutual TLS, its certificate's
// common name: "127.0.0.1:53122 cn=client.norsk".
func peerOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	s := p.Addr.String()
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		if cn := ti.State.PeerCertificates[0].Subject.CommonName; cn != "" {
			s += " cn=" + cn
		}
	}
	return s
}

// rolesAllowing lists the roles that allow a, narrowest first.
func rolesAllowing(a Access) []string {
	var out []string
	rs := Roles()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Allows(a) {
			out = append(out, string(rs[i]))
		}
	}
	return out
}

// orList is "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// shortMethod is "CreateJob" of "/norsk.api.manager.Manager/CreateJob".
func shortMethod(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}

// CallerMay reports whether the caller ctx carries may do what a needs:
// true with ACLs off (no role). The gateway uses it to blank what a role
// may not see (registration tokens for a read token).
func CallerMay(ctx context.Context, enabled bool, a Access) bool {
	if !enabled {
		return true
	}
	c, ok := identity.From(ctx)
	return ok && Role(c.Role).Allows(a)
}
