package noderesources

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// ZoneTag is the node tag that names a node's zone when its worker gives
// no --zone (a cluster slot registered with tags {zone: …}).
const ZoneTag = "zone"

// ShapeTag and SubnetTag are the node tags that name a node's shape and
// subnet when neither its create request nor its worker (--shape,
// --subnet) does.
const (
	ShapeTag  = "shape"
	SubnetTag = "subnet"
)

// FirstSet returns the first of values that is not empty, "" if none:
// how a node fact is resolved from its sources in order of authority
// (the cloud's create request, the worker's flag, the node's tag).
func FirstSet(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// Zone resolves a node's failure domain, the first that is set of:
//   - an OCI node's availability domain (ociAD, from its create request:
//     the cloud says where the instance is, whatever the worker claims);
//   - the zone its worker reports (--zone: an AWS node's availability
//     zone, given by its launch template's or image's worker setup; the
//     manager's default boot script does not pass it yet);
//   - the node's ZoneTag tag.
//
// "" means unknown: the placement engine (next step) must not take two
// nodes of unknown zone to be in different zones.
func Zone(provider managerpb.NodeProvider, ociAD, reported string, tags map[string]string) string {
	switch {
	case provider == managerpb.NodeProvider_NODE_PROVIDER_OCI && ociAD != "":
		return ociAD
	case reported != "":
		return reported
	}
	return tags[ZoneTag]
}

// Cloud is the cloud a node of provider belongs to, as a job's cloud field
// names it (CLOUD_UNSPECIFIED for an unknown provider).
func Cloud(provider managerpb.NodeProvider) managerpb.Cloud {
	switch provider {
	case managerpb.NodeProvider_NODE_PROVIDER_AWS:
		return managerpb.Cloud_CLOUD_AWS
	case managerpb.NodeProvider_NODE_PROVIDER_OCI:
		return managerpb.Cloud_CLOUD_OCI
	case managerpb.NodeProvider_NODE_PROVIDER_CLUSTER:
		return managerpb.Cloud_CLOUD_CLUSTER
	case managerpb.NodeProvider_NODE_PROVIDER_MOCK:
		return managerpb.Cloud_CLOUD_MOCK
	}
	return managerpb.Cloud_CLOUD_UNSPECIFIED
}
