package format

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// JobState renders a job state in lower case ("pre", "active", "post").
func JobState(s managerpb.Job_JobState) string { return Enum(s.String(), "") }

// Service renders one service of a job on one line: its name, then
// "image=", "command=" (quoted), "restart=" (with "(N in Ps)" when restarts
// are limited), "ports=" (each as PortMapping renders it) and "depends-on=",
// separated by two spaces. Fields that are not set are left out, except
// restart.
func Service(s *commonpb.Service) string {
	parts := []string{s.GetName()}
	if u := s.GetDocker().GetContainerUrl().GetUrl(); u != "" {
		parts = append(parts, "image="+u)
	}
	if s.GetCommand() != "" {
		parts = append(parts, "command="+strconv.Quote(s.GetCommand()))
	}
	restart := Enum(s.GetRestart().String(), "")
	if s.GetRestart() != commonpb.Service_NEVER && s.GetRestartCount() > 0 {
		restart += fmt.Sprintf(" (%d in %ds)", s.GetRestartCount(), s.GetRestartPeriod())
	}
	parts = append(parts, "restart="+restart)
	var ports []string
	for _, pm := range s.GetParameters().GetPortMappings() {
		ports = append(ports, PortMapping(pm))
	}
	if len(ports) > 0 {
		parts = append(parts, "ports="+strings.Join(ports, ","))
	}
	if len(s.GetDependsOn()) > 0 {
		parts = append(parts, "depends-on="+strings.Join(s.GetDependsOn(), ","))
	}
	return strings.Join(parts, "  ")
}

// PortMapping renders a requested port mapping as
// "127.0.0.1:18080->8080/tcp": the host address if any, the host port ("*"
// for an ephemeral port, "min-max" for a range), the container port and the
// protocol (Protocol).
func PortMapping(pm *commonpb.PortMapping) string {
	host := "*"
	switch {
	case pm.GetSpecific() != nil:
		host = strconv.FormatUint(uint64(pm.GetSpecific().GetPort()), 10)
	case pm.GetRange() != nil:
		host = fmt.Sprintf("%d-%d", pm.GetRange().GetMinPort(), pm.GetRange().GetMaxPort())
	}
	if pm.GetHostAddress() != "" {
		host = pm.GetHostAddress() + ":" + host
	}
	return fmt.Sprintf("%s->%d/%s", host, pm.GetContainerPort(), Protocol(pm.GetProtocol()))
}

// ResolvedPorts renders the ports a running job was given, per service, as
// "api: 10.0.0.5:19000->9000/tcp; web: 127.0.0.1:18080->8080/tcp
// 127.0.0.1:18081->5000/udp": services in name order separated by "; ",
// each service's ports in the order given (Published, target port,
// Protocol) separated by spaces. It returns "" if byService is empty.
func ResolvedPorts(byService map[string]*commonpb.ResolvedPortMappings) string {
	names := make([]string, 0, len(byService))
	for n := range byService {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		var ports []string
		for _, p := range byService[n].GetMappings() {
			ports = append(ports, fmt.Sprintf("%s->%d/%s", Published(p), p.GetTarget(), Protocol(p.GetProtocol())))
		}
		parts = append(parts, n+": "+strings.Join(ports, " "))
	}
	return strings.Join(parts, "; ")
}

// Published renders where a resolved port is published: its url without the
// scheme and trailing slash if it already ends in the published port
// ("tcp://127.0.0.1:18080" → "127.0.0.1:18080"), otherwise the url joined
// with the published port as host:port ("10.0.0.5" → "10.0.0.5:19000",
// bracketed if it holds a colon, as IPv6 addresses do), or just the published
// port if there is no url.
func Published(p *commonpb.ResolvedPortMapping) string {
	port := strconv.FormatUint(uint64(p.GetPublished()), 10)
	u := p.GetUrl()
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	u = strings.TrimSuffix(u, "/")
	switch {
	case u == "":
		return port
	case strings.HasSuffix(u, ":"+port):
		return u
	}
	return net.JoinHostPort(strings.Trim(u, "[]"), port)
}

// Protocol renders a protocol family as "tcp", "udp" or "any".
func Protocol(p commonpb.ProtocolFamily) string { return strings.ToLower(p.String()) }

// HistoryEntry renders one entry of a job's history as its time and a
// description ("created", "running role=primary node=n1 ports=…",
// "stopping role=primary node=n1 reason=…"). Format the time with Time. An
// entry of a kind this package does not know returns a nil time and
// "unknown history entry".
func HistoryEntry(h *managerpb.JobHistoryEntry) (*timestamppb.Timestamp, string) {
	switch e := h.GetHistoryEntry().(type) {
	case *managerpb.JobHistoryEntry_JobCreated:
		return e.JobCreated.GetTimestamp(), "created"
	case *managerpb.JobHistoryEntry_JobUpdated:
		return e.JobUpdated.GetTimestamp(), "updated"
	case *managerpb.JobHistoryEntry_JobProvisioned:
		p := e.JobProvisioned
		return p.GetTimestamp(), fmt.Sprintf("provisioned role=%s node=%s", Value(p.GetRole()), NodeOf(p.GetNodeMetadata()))
	case *managerpb.JobHistoryEntry_JobRunning:
		r := e.JobRunning
		s := fmt.Sprintf("running role=%s node=%s", Value(r.GetRole()), NodeOf(r.GetNodeMetadata()))
		if len(r.GetServicePortMappings()) > 0 {
			s += " ports=" + ResolvedPorts(r.GetServicePortMappings())
		}
		return r.GetTimestamp(), s
	case *managerpb.JobHistoryEntry_JobStopping:
		s := e.JobStopping
		return s.GetTimestamp(), fmt.Sprintf("stopping role=%s node=%s reason=%s",
			Value(s.GetRole()), NodeOf(s.GetNodeMetadata()), Enum(s.GetReason().String(), "JOB_STOPPED_"))
	case *managerpb.JobHistoryEntry_JobStopped:
		s := e.JobStopped
		return s.GetTimestamp(), fmt.Sprintf("stopped role=%s node=%s", Value(s.GetRole()), NodeOf(s.GetNodeMetadata()))
	case *managerpb.JobHistoryEntry_JobCompleted:
		return e.JobCompleted.GetTimestamp(), "completed"
	}
	return nil, "unknown history entry"
}
