package agent

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// With mutual TLS the API's handshake asks for a client certificate but
// does not require one (tls.VerifyClientCertIfGiven; one that is given must
// chain to the CA): a cloud worker registers with its single-use token and
// a self-signed certificate it does not present, having no certificate of
// the CA to present (docs/design/security.md, "Cloud workers"). This is
// the one place that decides what such a connection may call: only
// ClusterMemberRegister, whose request carries its own authority (the
// token, or the node credential) and which the ACL table
// (cluster/acl/methods.go) marks AccessNone for that reason. Every other
// method of every service on the API port (the Manager API, health,
// reflection, the managers' internal service) is refused Unauthenticated
// before the ACL layer or a handler sees it. The worker makes no other
// call on the API port: its session is the manager's dial-back.

// methodsWithoutClientCert are the full methods a TLS connection without a
// client certificate may call.
var methodsWithoutClientCert = map[string]bool{
	managerpb.Manager_ClusterMemberRegister_FullMethodName: true,
}

// checkClientCert returns Unauthenticated when the caller presented no
// verified client certificate and method is not one of
// methodsWithoutClientCert; nil otherwise. Called with mutual TLS only.
func checkClientCert(ctx context.Context, method string) error {
	if methodsWithoutClientCert[method] {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Errorf(codes.Unauthenticated, "%s needs a client certificate of the cluster CA: no peer", method)
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		return nil
	}
	return status.Errorf(codes.Unauthenticated,
		"%s needs a client certificate of the cluster CA (norsk-ctl --client-cert/--client-key); %s presented none, "+
			"which is allowed for ClusterMemberRegister only", method, p.Addr)
}
