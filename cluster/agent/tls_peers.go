package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/cluster/replication"
)

// The links between managers in a cluster — the Raft transport and the
// protoactor remote (the actor port) — use mutual TLS from the same
// TLSConfig as the API (ARCHITECTURE §9: one place), whenever the API
// serves TLS: each side presents its server certificate, and the other's
// must chain to the cluster CA and carry PeerName. So a process without a
// certificate of the CA can neither connect to those ports nor be dialled
// by them, and the leader adds a member as a Raft voter only once its
// Raft port passes that handshake (peerReachable). Gossip keeps its own
// key (--gossip-key). docs/design/security.md, "Raft and actor ports".

// errClusterTLSNeedsCA is returned by New for a cluster whose API serves
// TLS without a CA: the managers' links could not verify each other.
var errClusterTLSNeedsCA = errors.New("cluster: --tls-cert without --tls-ca: in a cluster the Raft and actor ports use mutual TLS " +
	"and need the cluster CA (--tls-ca) to verify the other managers; give --tls-ca, or no --tls-* flag for a plaintext cluster")

// peers reports whether the links between managers use mutual TLS.
func (c TLSConfig) peers() bool { return c.mutual() }

func (c TLSConfig) peerName() string {
	if c.PeerName != "" {
		return c.PeerName
	}
	return pki.RoleName(pki.RoleServer, pki.DefaultDomain)
}

// validateCluster refuses a cluster with TLS on the API but no CA.
func (c TLSConfig) validateCluster(cc ClusterConfig) error {
	if cc.Enabled() && c.enabled() && !c.mutual() {
		return errClusterTLSNeedsCA
	}
	return nil
}

// raftTLS is the Raft transport's TLS; nil without peer TLS.
func (c TLSConfig) raftTLS() *replication.PeerTLS {
	if !c.peers() {
		return nil
	}
	name := c.peerName()
	return &replication.PeerTLS{
		Server: c.Certs.PeerServerConfig(name),
		Client: func() *tls.Config { return c.Certs.PeerClientConfig(name) },
	}
}

// actorRemoteOptions are the protoactor remote's options. Always: its
// gRPC server answers every unary method Unimplemented (refuseUnary).
// With peer TLS: the server requires a manager's certificate of the CA,
// and every dial presents this manager's and verifies the other's against
// the CA and PeerName (the authority, which gRPC checks); without,
// protoactor's default plaintext dial.
//
// The dialling side's CA bundle is read when the actor layer starts (a
// rejoin or a restart picks up a new one); its certificate pair and the
// server side's pair and CA follow every reload.
func (c TLSConfig) actorRemoteOptions() []remote.ConfigOption {
	server := []grpc.ServerOption{grpc.UnaryInterceptor(refuseUnary)}
	if !c.peers() {
		return []remote.ConfigOption{remote.WithServerOptions(server...)}
	}
	name := c.peerName()
	return []remote.ConfigOption{
		remote.WithServerOptions(append(server, grpc.Creds(credentials.NewTLS(c.Certs.PeerServerConfig(name, "h2"))))...),
		remote.WithDialOptions(
			grpc.WithTransportCredentials(credentials.NewTLS(c.Certs.PeerClientConfig(name))),
			grpc.WithAuthority(name),
		),
	}
}

// refuseUnary answers every unary call on the actor port with
// Unimplemented. Managers use only its Receive stream; the pinned
// protoactor's ListProcesses and GetProcessDiagnostics panic ("implement
// me"), which would end the manager's process on one call from anyone who
// reaches the port.
func refuseUnary(_ context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	return nil, status.Errorf(codes.Unimplemented, "actor port: %s is not served (only the Receive stream between managers is)", info.FullMethod)
}

// peerReachable returns the leader's test of a Raft address before it adds
// a voter (ncluster.LeaderConfig.Reachable) and bootstraps: the
// replicator's Probe — with peer TLS, a mutual TLS handshake. A refusal
// for TLS reasons is logged at WARN once per address and error, so an
// operator sees why a manager is never added.
func (c *clustered) peerReachable() func(raft.ServerAddress) bool {
	var mu sync.Mutex
	logged := map[raft.ServerAddress]string{}
	return func(addr raft.ServerAddress) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := c.rep.Probe(ctx, string(addr))
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			delete(logged, addr)
			return true
		}
		if c.rep.TLS() && logged[addr] != err.Error() {
			logged[addr] = err.Error()
			c.a.log.Warn("raft address refused mutual tls: not adding it as a voter (does that manager have a server certificate of the cluster CA, and --tls-ca?)",
				"raft_addr", addr, "error", err)
		}
		return false
	}
}

// peersAnswer reports whether every other manager of servers passes the
// Raft probe (peerReachable).
func (c *clustered) peersAnswer(servers map[string]string) bool {
	reach := c.peerReachable()
	for name, addr := range servers {
		if name != c.a.cfg.Cluster.Name && !reach(raft.ServerAddress(addr)) {
			return false
		}
	}
	return true
}

// providerOptions are the actor-cluster provider's options: with peer
// TLS, only members that are Raft servers at their advertised Raft
// address host grains (isRaftServer). Gossip alone admits a process that
// has the gossip key; the Raft configuration admits only managers whose
// Raft port passed the leader's mutual TLS probe, and protoactor's
// requests to anything else would fail their handshake.
func (c *clustered) providerOptions() []membership.ProviderOption {
	if !c.a.cfg.TLS.peers() {
		return nil
	}
	return []membership.ProviderOption{membership.WithAdmit(c.isRaftServer)}
}

// isRaftServer reports whether m is in the Raft configuration under its
// name and at the Raft address it advertises.
func (c *clustered) isRaftServer(m membership.Member) bool {
	f := c.rep.Raft().GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == m.Name {
			return string(s.Address) == m.Meta.RaftAddr
		}
	}
	return false
}
