package agent

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// The managers' internal Cluster service (Append, ReadIndex, Status,
// Liveness) is served on the API port and is not an API method: it is
// outside the ACL table, and Append writes to the journal. Only another
// manager may call it. With mutual TLS that is a peer whose certificate
// (already verified against the CA) carries the managers' name
// (--tls-peer-name, server.norsk): an operator's or worker's certificate of
// the same CA is refused, as on the Raft and actor ports. Without TLS the
// cluster trusts its network (docs/design/security.md), and a cluster with
// --acl needs mutual TLS (errClusterACLNeedsTLS), so ACLs cannot be
// bypassed through it. docs/design/security.md, "The internal service".

// clusterServicePrefix is the full-method prefix of the internal service.
var clusterServicePrefix = "/" + internalpb.Cluster_ServiceDesc.ServiceName + "/"

// errClusterACLNeedsTLS is returned by New for a cluster with ACLs but no
// mutual TLS: the internal service could not tell a manager from anyone.
var errClusterACLNeedsTLS = errors.New("cluster: --acl needs mutual TLS between the managers (--tls-cert, --tls-key and --tls-ca): " +
	"the managers' internal service on the API port (which appends to the replicated log) is authorised by their certificates, " +
	"and without them any process reaching the API port could write around the ACLs")

// validateClusterACL refuses a cluster with ACLs and no mutual TLS.
func validateClusterACL(cc ClusterConfig, acl bool, tlsCfg TLSConfig) error {
	if cc.Enabled() && acl && !tlsCfg.mutual() {
		return errClusterACLNeedsTLS
	}
	return nil
}

// internalGuardOptions are the API server's interceptors, with mutual TLS,
// that refuse a call from a peer without a client certificate
// (checkClientCert: all but the registration) and a call of the internal
// service from a peer that is not a manager; none without mutual TLS.
// They run before the ACL interceptors.
func (c TLSConfig) internalGuardOptions() []grpc.ServerOption {
	if !c.mutual() {
		return nil
	}
	name := c.peerName()
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := checkClientCert(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			if err := checkManagerPeer(ctx, info.FullMethod, name); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := checkClientCert(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			if err := checkManagerPeer(ss.Context(), info.FullMethod, name); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// checkManagerPeer returns PermissionDenied when method belongs to the
// internal service and the caller's verified certificate does not carry
// name; nil for every other method.
func checkManagerPeer(ctx context.Context, method, name string) error {
	if !strings.HasPrefix(method, clusterServicePrefix) {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is for the managers of the cluster only: no peer", method)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return status.Errorf(codes.PermissionDenied, "%s is for the managers of the cluster only: %s presented no verified certificate", method, p.Addr)
	}
	leaf := ti.State.PeerCertificates[0]
	if err := leaf.VerifyHostname(name); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s is for the managers of the cluster only: certificate %q of %s does not carry %q",
			method, leaf.Subject.CommonName, p.Addr, name)
	}
	return nil
}
