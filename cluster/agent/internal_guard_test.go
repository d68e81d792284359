package agent

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func TestCheckManagerPeer(t *testing.T) {
	plain := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
		want   codes.Code
	}{
		{"an API method is not checked", plain, "/norsk.api.manager.Manager/CreateJob", codes.OK},
		{"internal, no peer", context.Background(), clusterServicePrefix + "Append", codes.PermissionDenied},
		{"internal, no TLS", plain, clusterServicePrefix + "Append", codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(checkManagerPeer(tc.ctx, tc.method, "server.norsk")); got != tc.want {
				t.Fatalf("code %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateClusterACL(t *testing.T) {
	cluster := ClusterConfig{BootstrapExpect: 3}
	if err := validateClusterACL(cluster, true, TLSConfig{}); err == nil {
		t.Fatal("a cluster with --acl and no mutual TLS was accepted")
	}
	if err := validateClusterACL(ClusterConfig{}, true, TLSConfig{}); err != nil {
		t.Fatalf("a single manager with --acl: %v", err)
	}
	if err := validateClusterACL(cluster, false, TLSConfig{}); err != nil {
		t.Fatalf("a cluster without --acl: %v", err)
	}
}
