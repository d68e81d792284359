package format

import (
	"math"
	"strconv"
	"strings"
	"time"

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

// Instances renders the job instances running on a node as
// "<job id>/<role>" joined by commas ("hello-http/primary,j2/backup"), in
// the order given, or "-" if there are none: the JOBS of a node (node
// list, node_running and physical_node_connected events). A part of the
// key the manager left empty stays empty ("/primary").
func Instances(instances []*managerpb.RunningJob) string {
	return joinInstances(instances, func(rj *managerpb.RunningJob) string {
		return rj.GetJobKey().GetJobId().GetJobId() + "/" + rj.GetJobKey().GetRole()
	})
}

// Placements renders where one job's instances run as "<role>@<node id>"
// joined by commas ("primary@n1,backup@n2"), in the order given, or "-" if
// there are none: the INSTANCES of a job (job search).
func Placements(instances []*managerpb.RunningJob) string {
	return joinInstances(instances, func(rj *managerpb.RunningJob) string {
		return rj.GetJobKey().GetRole() + "@" + rj.GetNodeId().GetNodeId()
	})
}

// joinInstances renders each instance with one and joins them with commas;
// "-" if there are none.
func joinInstances(instances []*managerpb.RunningJob, one func(*managerpb.RunningJob) string) string {
	if len(instances) == 0 {
		return "-"
	}
	parts := make([]string, len(instances))
	for i, rj := range instances {
		parts[i] = one(rj)
	}
	return strings.Join(parts, ",")
}

// RuntimeConditions renders the runtime conditions a node's worker reports
// as "<runtime> ok" or "<runtime> down" joined by commas ("docker down"),
// or "-" if there are none (a process worker, or no session up): the
// RUNTIME of a node (node list). RuntimeCondition renders one with its
// reason.
func RuntimeConditions(conds []*commonpb.RuntimeCondition) string {
	if len(conds) == 0 {
		return "-"
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = c.GetRuntime() + " " + map[bool]string{true: "ok", false: "down"}[c.GetOk()]
	}
	return strings.Join(parts, ",")
}

// RuntimeCondition renders one runtime condition for node get: "docker: ok
// since 3m ago", or "docker: down since 10s ago: <reason>".
func RuntimeCondition(now time.Time, c *commonpb.RuntimeCondition) string {
	s := c.GetRuntime() + ": " + map[bool]string{true: "ok", false: "down"}[c.GetOk()]
	if c.GetSince() != nil {
		s += " since " + Age(now, c.GetSince())
	}
	if c.GetReason() != "" {
		s += ": " + c.GetReason()
	}
	return s
}

// Units renders a number of reference units with at most two decimals and
// no trailing zeros ("3.5", "8", "0.25"; sums such as 0.1+0.2 print as
// "0.3").
func Units(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// Capacity renders a node's capacity as "<allocated>/<total>" in reference
// units ("3.5/8"): the CAPACITY of a node (node list). A node whose worker
// never reported its capacity (an older worker, or no worker yet) shows
// "<allocated>/?".
func Capacity(n *managerpb.NodeInfo) string {
	total := "?"
	if n.GetResources() != nil {
		total = Units(n.GetResources().GetCapacity())
	}
	return Units(n.GetAllocatedCapacity()) + "/" + total
}

// Templates renders a node's product-template catalogue compactly for a
// table cell, in the order reported: "hello(1.0,1.1),ingest(2)", or "-"
// for none (the TEMPLATES of a node, node list). node get spells it out
// (noderesources.DescribeTemplates).
func Templates(ts []*commonpb.ProductTemplateOffer) string {
	if len(ts) == 0 {
		return "-"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.GetName() + "(" + strings.Join(t.GetVersions(), ",") + ")"
	}
	return strings.Join(parts, ",")
}

// Zone renders a node's zone, or "-" if it is unknown.
func Zone(zone string) string {
	if zone == "" {
		return "-"
	}
	return zone
}
