package agent

import (
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/cluster/gateway"
)

// ACLResetFileName is the bootstrap reset file in a manager's data dir
// (docs/design/security.md, "Bootstrap and its reset").
const ACLResetFileName = "acl-bootstrap-reset"

// aclServerOptions are the API server's interceptors: every call is
// authorised (with Config.ACL) and carries its caller (identity), ACLs on
// or off. Other interceptors chain after them.
func (a *Agent) aclServerOptions() ([]grpc.ServerOption, error) {
	auth, err := acl.New(acl.Config{
		Enabled: a.cfg.ACL,
		Tokens:  acl.StoreTokens(a.store),
		Logger:  a.log.With("component", "acl"),
	})
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(auth.StreamInterceptor()),
	}, nil
}

// aclGatewayConfig is the gateway's part of the ACL configuration.
func (a *Agent) aclGatewayConfig() gateway.ACLConfig {
	return gateway.ACLConfig{Enabled: a.cfg.ACL, ResetFile: filepath.Join(a.cfg.Store.Dir, ACLResetFileName)}
}
