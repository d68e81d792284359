package clienttest

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// SetClusterMembers makes ClusterMembers answer resp (a copy), as a
// manager whose view of the cluster it is; nil restores the default,
// Unimplemented.
func (m *Manager) SetClusterMembers(resp *managerpb.ClusterMembersResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if resp != nil {
		resp = proto.Clone(resp).(*managerpb.ClusterMembersResponse)
	}
	m.mu.members = resp
}

// ClusterMembers answers what SetClusterMembers set (or an injected
// error); Unimplemented if nothing was set.
func (m *Manager) ClusterMembers(context.Context, *managerpb.ClusterMembersRequest) (*managerpb.ClusterMembersResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("ClusterMembers"); err != nil {
		return nil, err
	}
	if m.mu.members == nil {
		return nil, status.Error(codes.Unimplemented, "clienttest: no cluster members set (SetClusterMembers)")
	}
	return proto.Clone(m.mu.members).(*managerpb.ClusterMembersResponse), nil
}
