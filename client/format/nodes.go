package format

import (
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// NodeOf returns the node id in md, or "-" if md carries none.
func NodeOf(md *commonpb.NodeMetadata) string {
	if id := md.GetNodeId().GetNodeId(); id != "" {
		return id
	}
	return "-"
}

// NodeAddress renders the most useful address of a running node: the first
// non-empty of its private IP address, public IP address, private DNS name
// and public DNS name, or "-" if it has none.
func NodeAddress(r *commonpb.RunningNodeMetadata) string {
	for _, a := range []string{r.GetPrivateIpAddress(), r.GetPublicIpAddress(), r.GetPrivateDnsName(), r.GetPublicDnsName()} {
		if a != "" {
			return a
		}
	}
	return "-"
}

// Instances renders running job instances as "role@node,role2@node2" in the
// order given, or "-" if there are none.
func Instances(instances []*managerpb.RunningJob) string {
	if len(instances) == 0 {
		return "-"
	}
	parts := make([]string, len(instances))
	for i, rj := range instances {
		parts[i] = rj.GetJobKey().GetRole() + "@" + rj.GetNodeId().GetNodeId()
	}
	return strings.Join(parts, ",")
}
