package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// tokenCreds sends Settings.Token with every call as
// "authorization: Bearer <secret>" metadata.
type tokenCreds struct{ secret string }

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.secret}, nil
}

// RequireTransportSecurity is false: a token may be sent over plaintext
// to a manager without TLS (a loopback or test setup). Use TLS wherever
// the network is not trusted: the token is a bearer credential.
func (tokenCreds) RequireTransportSecurity() bool { return false }

// tokenDialOption is the dial option that sends token with every call (nil
// when token is empty).
func tokenDialOption(token string) []grpc.DialOption {
	if token == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(tokenCreds{secret: token})}
}

// checkToken validates Settings.Token: no whitespace or control
// characters (it travels in a metadata header).
func checkToken(token string) error {
	if strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return errors.New("client: Settings.Token has whitespace or control characters (a newline from the token file?)")
	}
	return nil
}

// AclBootstrap creates the cluster's first management token and returns
// it with its secret (SecretId), which is shown this once: keep it.
// Needs no token. codes.FailedPrecondition: ACLs are off, or the cluster
// was bootstrapped already (the message names the reset procedure).
func (m *NorskManager) AclBootstrap(ctx context.Context) (*managerpb.AclToken, error) {
	return unary(ctx, m, "AclBootstrap", &managerpb.AclBootstrapRequest{}, m.api.AclBootstrap)
}

// AclTokenCreate creates a token of role ("management", "operator",
// "read", "events") named name, expiring ttl after now (0: never), and
// returns it with its secret, shown this once. Needs a management token.
// codes.InvalidArgument names a bad field.
func (m *NorskManager) AclTokenCreate(ctx context.Context, name, role string, ttl time.Duration) (*managerpb.AclToken, error) {
	if ttl < 0 {
		return nil, invalidArg("AclTokenCreate", fmt.Sprintf("ttl %s is negative", ttl))
	}
	if ttl > 0 && ttl < time.Millisecond {
		ttl = time.Millisecond
	}
	return unary(ctx, m, "AclTokenCreate", &managerpb.AclTokenCreateRequest{Name: name, Role: role, TtlMs: ttl.Milliseconds()}, m.api.AclTokenCreate)
}

// AclTokenList returns every token, without secrets. Needs a management
// token.
func (m *NorskManager) AclTokenList(ctx context.Context) (*managerpb.AclTokenListResponse, error) {
	return unary(ctx, m, "AclTokenList", &managerpb.AclTokenListRequest{}, m.api.AclTokenList)
}

// AclTokenRevoke deletes the token with accessor id. Needs a management
// token. codes.NotFound: no such token; codes.FailedPrecondition: it is
// the last management token.
func (m *NorskManager) AclTokenRevoke(ctx context.Context, accessorID string) error {
	if accessorID == "" {
		return invalidArg("AclTokenRevoke", "accessor id is empty")
	}
	_, err := unary(ctx, m, "AclTokenRevoke", &managerpb.AclTokenRevokeRequest{AccessorId: accessorID}, m.api.AclTokenRevoke)
	return err
}

// AclTokenSelf returns the token the client sends (Settings.Token),
// without its secret.
func (m *NorskManager) AclTokenSelf(ctx context.Context) (*managerpb.AclToken, error) {
	return unary(ctx, m, "AclTokenSelf", &managerpb.AclTokenSelfRequest{}, m.api.AclTokenSelf)
}
