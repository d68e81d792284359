package agent

import (
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/cluster/gateway"
	"github.com/norsk-oss/norsk-manager/persistence"
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
	a.warnACLOff()
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(auth.StreamInterceptor()),
	}, nil
}

// aclGatewayConfig is the gateway's part of the ACL configuration.
func (a *Agent) aclGatewayConfig() gateway.ACLConfig {
	return gateway.ACLConfig{Enabled: a.cfg.ACL, ResetFile: filepath.Join(a.cfg.Store.Dir, ACLResetFileName)}
}

// warnACLOff logs an error when this manager runs without --acl but its
// replica shows the cluster's ACLs bootstrapped: a mixed cluster, in which
// this manager serves every call unauthenticated.
func (a *Agent) warnACLOff() {
	if a.cfg.ACL {
		return
	}
	_ = a.store.View(func(r *persistence.Reader) error {
		if rec, _, err := r.ACL(); err == nil && rec.GetBootstrapIndex() > 0 {
			a.log.Error("this cluster's ACLs are bootstrapped but this manager runs without --acl: it serves every call unauthenticated; restart it with --acl",
				"tokens", len(rec.GetTokens()))
		}
		return nil
	})
}
