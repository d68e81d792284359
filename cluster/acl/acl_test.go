package acl

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestMethodTable_CoversManager: every method of the Manager service has
// an entry, and the table names no method the service does not have.
func TestMethodTable_CoversManager(t *testing.T) {
	sd := managerpb.Manager_ServiceDesc
	have := map[string]bool{}
	for _, m := range sd.Methods {
		have[m.MethodName] = true
	}
	for _, s := range sd.Streams {
		have[s.StreamName] = true
	}
	for name := range have {
		a, in, ok := MethodAccess("/" + sd.ServiceName + "/" + name)
		require.True(t, in)
		require.True(t, ok, "method %s has no entry in methodAccess (cluster/acl/methods.go): say what it needs", name)
		require.NotZero(t, a)
	}
	for name := range methodAccess {
		require.True(t, have[name], "methodAccess names %s, which the Manager service does not have", name)
	}
	_, in, _ := MethodAccess("/grpc.health.v1.Health/Check")
	require.False(t, in)
}

// TestMethodTable_Rules pins the rules the issue states.
func TestMethodTable_Rules(t *testing.T) {
	cases := []struct {
		method string
		want   Access
	}{
		{"ClusterMemberRegister", AccessNone}, // the worker's own credentials
		{"AclBootstrap", AccessNone},
		{"EventStream", AccessEvents},
		{"ListClusterNodes", AccessRead},
		{"CreateJob", AccessOperate},
		{"RegisterClusterNode", AccessOperate},
		{"SnapshotSave", AccessManage}, // a backup holds every registration token
		{"AclTokenCreate", AccessManage},
		{"AclTokenRevoke", AccessManage},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			a, _, ok := MethodAccess("/norsk.api.manager.Manager/" + c.method)
			require.True(t, ok)
			require.Equal(t, c.want, a)
		})
	}
}

func TestRole_Allows(t *testing.T) {
	all := []Access{AccessNone, AccessAny, AccessEvents, AccessRead, AccessOperate, AccessManage}
	cases := []struct {
		role Role
		max  int // index in all of the widest access allowed
	}{
		{RoleManagement, 5}, {RoleOperator, 4}, {RoleRead, 3}, {RoleEvents, 2}, {"bogus", 0}, {"", 0},
	}
	for _, c := range cases {
		t.Run(string(c.role), func(t *testing.T) {
			for i, a := range all {
				require.Equal(t, i <= c.max, c.role.Allows(a), "%s allows %s", c.role, a)
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	r, err := ParseRole("operator")
	require.NoError(t, err)
	require.Equal(t, RoleOperator, r)
	_, err = ParseRole("admin")
	require.ErrorContains(t, err, "management, operator, read, events")
}

func TestSecret(t *testing.T) {
	a, err := NewSecret()
	require.NoError(t, err)
	b, err := NewSecret()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, secretPrefix))
	require.Len(t, a, len(secretPrefix)+43)
	require.Len(t, HashSecret(a), 32)
	require.True(t, SameHash(HashSecret(a), HashSecret(a)))
	require.False(t, SameHash(HashSecret(a), HashSecret(b)))
	require.False(t, SameHash(HashSecret(a), HashSecret(a)[:31]))
}

func TestBearerSecret(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"Bearer s1", "s1", ""},
		{"bearer  s1 ", "s1", ""},
		{"Basic s1", "", "Bearer <token secret>"},
		{"s1", "", "Bearer <token secret>"},
		{"Bearer ", "", "no token secret"},
	}
	for _, c := range cases {
		got, err := bearerSecret(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got)
	}
}

// fakeTokens is a TokenFinder over a map of secret → token.
type fakeTokens map[string]*internalpb.AclTokenRecord

func (f fakeTokens) FindToken(h []byte) (*internalpb.AclTokenRecord, error) {
	for _, t := range f {
		if SameHash(t.GetSecretHash(), h) {
			return t, nil
		}
	}
	return nil, persistence.ErrNotFound
}

func (f fakeTokens) add(secret, id string, role Role, exp time.Time) {
	t := &managerpb.AclToken{AccessorId: id, Name: "name-" + id, Role: string(role)}
	if !exp.IsZero() {
		t.ExpireTime = timestamppb.New(exp)
	}
	f[secret] = &internalpb.AclTokenRecord{Token: t, SecretHash: HashSecret(secret)}
}

func callCtx(secret ...string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}})
	md := metadata.MD{}
	for _, s := range secret {
		md.Append(MetadataKey, s)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// TestAuthorizer_Authorize: the refusals of issue 12 §2 and the caller
// every accepted call carries.
func TestAuthorizer_Authorize(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	toks := fakeTokens{}
	toks.add("m", "tm", RoleManagement, time.Time{})
	toks.add("o", "to", RoleOperator, time.Time{})
	toks.add("r", "tr", RoleRead, now.Add(time.Hour))
	toks.add("e", "te", RoleEvents, time.Time{})
	toks.add("x", "tx", RoleOperator, now) // expires now: refused
	a, err := New(Config{Enabled: true, Tokens: toks, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	const m = "/norsk.api.manager.Manager/"
	cases := []struct {
		name, method string
		ctx          context.Context
		code         codes.Code
		msg          string
		who          string // caller name when accepted
	}{
		{"no token", m + "JobSearch", callCtx(), codes.Unauthenticated, "requires an ACL token", ""},
		{"not bearer", m + "JobSearch", callCtx("Token r"), codes.Unauthenticated, "Bearer", ""},
		{"two tokens", m + "JobSearch", callCtx("Bearer r", "Bearer m"), codes.Unauthenticated, "exactly one", ""},
		{"unknown", m + "JobSearch", callCtx("Bearer zz"), codes.Unauthenticated, "unknown ACL token", ""},
		{"expired", m + "JobSearch", callCtx("Bearer x"), codes.Unauthenticated, "expired at 2030-01-01T00:00:00Z", ""},
		{"read reads", m + "JobSearch", callCtx("Bearer r"), codes.OK, "", "name-tr"},
		{"read writes", m + "CreateJob", callCtx("Bearer r"), codes.PermissionDenied, "CreateJob needs a token of role operator or management; token \"name-tr\" (tr) has role \"read\"", ""},
		{"operator writes", m + "CreateJob", callCtx("Bearer o"), codes.OK, "", "name-to"},
		{"operator tokens", m + "AclTokenCreate", callCtx("Bearer o"), codes.PermissionDenied, "role management", ""},
		{"operator backup", m + "SnapshotSave", callCtx("Bearer o"), codes.PermissionDenied, "role management", ""},
		{"management tokens", m + "AclTokenCreate", callCtx("Bearer m"), codes.OK, "", "name-tm"},
		{"events stream", m + "EventStream", callCtx("Bearer e"), codes.OK, "", "name-te"},
		{"events reads", m + "JobSearch", callCtx("Bearer e"), codes.PermissionDenied, "role read, operator or management", ""},
		{"worker registers", m + "ClusterMemberRegister", callCtx(), codes.OK, "", identity.Anonymous},
		{"bootstrap", m + "AclBootstrap", callCtx(), codes.OK, "", identity.Anonymous},
		{"health", "/grpc.health.v1.Health/Check", callCtx(), codes.OK, "", identity.Anonymous},
		{"not in table", m + "NoSuchMethod", callCtx("Bearer m"), codes.PermissionDenied, "no entry in the manager's ACL table", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, err := a.Authorize(c.ctx, c.method)
			require.Equal(t, c.code, status.Code(err), "%v", err)
			if c.code != codes.OK {
				require.Contains(t, status.Convert(err).Message(), c.msg)
				require.Nil(t, ctx)
				return
			}
			who, ok := identity.From(ctx)
			require.True(t, ok)
			require.Equal(t, c.who, who.Name)
			require.Equal(t, "127.0.0.1:5000", who.Peer)
		})
	}
}

// TestAuthorizer_Off: with ACLs off every call passes as anonymous, a
// token or not.
func TestAuthorizer_Off(t *testing.T) {
	a, err := New(Config{})
	require.NoError(t, err)
	ctx, err := a.Authorize(callCtx("Bearer whatever"), "/norsk.api.manager.Manager/CreateJob")
	require.NoError(t, err)
	who, ok := identity.From(ctx)
	require.True(t, ok)
	require.Equal(t, identity.Caller{Name: identity.Anonymous, Peer: "127.0.0.1:5000"}, who)
	require.True(t, CallerMay(ctx, false, AccessOperate))
	_, err = New(Config{Enabled: true})
	require.Error(t, err)
}

// TestAuthorizer_Interceptors: the unary interceptor never calls a
// refused handler; the stream interceptor hands the handler a stream
// whose context carries the caller.
func TestAuthorizer_Interceptors(t *testing.T) {
	toks := fakeTokens{}
	toks.add("r", "tr", RoleRead, time.Time{})
	a, err := New(Config{Enabled: true, Tokens: toks})
	require.NoError(t, err)
	called := false
	_, err = a.UnaryInterceptor()(callCtx("Bearer r"), nil, &grpc.UnaryServerInfo{FullMethod: "/norsk.api.manager.Manager/DeleteJob"},
		func(context.Context, any) (any, error) { called = true; return nil, nil })
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.False(t, called, "a refused call reached its handler")

	var got identity.Caller
	err = a.StreamInterceptor()(nil, fakeStream{ctx: callCtx("Bearer r")}, &grpc.StreamServerInfo{FullMethod: "/norsk.api.manager.Manager/EventStream"},
		func(_ any, ss grpc.ServerStream) error { got, _ = identity.From(ss.Context()); return nil })
	require.NoError(t, err)
	require.Equal(t, identity.Caller{Name: "name-tr", TokenID: "tr", Role: "read", Peer: "127.0.0.1:5000"}, got)
	require.True(t, CallerMay(identity.With(context.Background(), got), true, AccessRead))
	require.False(t, CallerMay(identity.With(context.Background(), got), true, AccessOperate))
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

// sendStream is a fakeStream that counts the messages that reach the wire.
type sendStream struct {
	fakeStream
	sent int
}

func (s *sendStream) SendMsg(any) error { s.sent++; return nil }

// TestAuthorizer_StreamRecheck: a stream opened with a token stops
// delivering once the token is revoked or expires. Before, an open
// EventStream kept sending every event to a revoked token's holder for as
// long as the connection lasted.
func TestAuthorizer_StreamRecheck(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		exp    time.Time
		revoke func(fakeTokens, *time.Time)
		msg    string
	}{
		{"revoked", time.Time{}, func(f fakeTokens, _ *time.Time) { delete(f, "e") }, "revoked"},
		{"expired", now.Add(time.Minute), func(_ fakeTokens, clk *time.Time) { *clk = now.Add(time.Minute) }, "expired at 2030-01-01T00:01:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := now
			toks := fakeTokens{}
			toks.add("e", "te", RoleEvents, c.exp)
			a, err := New(Config{Enabled: true, Tokens: toks, Clock: func() time.Time { return clk }})
			require.NoError(t, err)
			ss := &sendStream{fakeStream: fakeStream{ctx: callCtx("Bearer e")}}
			err = a.StreamInterceptor()(nil, ss, &grpc.StreamServerInfo{FullMethod: "/norsk.api.manager.Manager/EventStream"},
				func(_ any, s grpc.ServerStream) error {
					require.NoError(t, s.SendMsg(nil), "send while the token is valid")
					c.revoke(toks, &clk)
					return s.SendMsg(nil)
				})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), c.msg)
			require.Equal(t, 1, ss.sent, "a message reached a stream whose token is no longer valid")
		})
	}
}
