package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ctlJSON renders msg as protojson, normalised by encoding/json so that the
// output is stable (protojson deliberately varies its whitespace). indent ""
// gives one line.
func ctlJSON(msg proto.Message, indent string) ([]byte, error) {
	raw, err := protojson.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode %s as JSON: %w", msg.ProtoReflect().Descriptor().FullName(), err)
	}
	var buf bytes.Buffer
	if indent == "" {
		err = json.Compact(&buf, raw)
	} else {
		err = json.Indent(&buf, raw, "", indent)
	}
	if err != nil {
		return nil, fmt.Errorf("normalise JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// printJSON writes msg as indented protojson and a newline.
func (e *ctlEnv) printJSON(msg proto.Message) error {
	b, err := ctlJSON(msg, "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.out, "%s\n", b)
	return err
}

// ctlPrintJSONList writes msgs as an indented JSON array of protojson objects.
func ctlPrintJSONList[T proto.Message](e *ctlEnv, msgs []T) error {
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		b, err := ctlJSON(m, "")
		if err != nil {
			return err
		}
		parts = append(parts, string(b))
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte("["+strings.Join(parts, ",")+"]"), "", "  "); err != nil {
		return fmt.Errorf("normalise JSON: %w", err)
	}
	_, err := fmt.Fprintf(e.out, "%s\n", buf.Bytes())
	return err
}

// ctlTable writes rows under header, aligned in columns.
func ctlTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// ctlFmtTags renders tags as "k=v,k2=v2" in key order, "-" if none.
func ctlFmtTags(tags map[string]string) string {
	if len(tags) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tags[k]
	}
	return strings.Join(parts, ",")
}

// ctlFmtTime renders ts in RFC 3339 (UTC), "-" if absent.
func ctlFmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// ctlFmtAge renders how long before now ts was ("12s ago"), "never" if absent.
func ctlFmtAge(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil || ts.AsTime().IsZero() || ts.AsTime().Unix() == 0 {
		return "never"
	}
	d := now.Sub(ts.AsTime())
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// ctlEnum renders an enum value name without its prefix, in lower case
// ("NODE_LIFECYCLE_STARTED" → "started").
func ctlEnum(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// ctlNodeOf returns the node id in md, "-" if none.
func ctlNodeOf(md *commonpb.NodeMetadata) string {
	if id := md.GetNodeId().GetNodeId(); id != "" {
		return id
	}
	return "-"
}

// ctlFmtInstances renders running instances as "role@node,…", "-" if none.
func ctlFmtInstances(instances []*managerpb.RunningJob) string {
	if len(instances) == 0 {
		return "-"
	}
	parts := make([]string, len(instances))
	for i, rj := range instances {
		parts[i] = rj.GetJobKey().GetRole() + "@" + rj.GetNodeId().GetNodeId()
	}
	return strings.Join(parts, ",")
}

// ctlFmtResolvedPorts renders a service's resolved ports as
// "web: 127.0.0.1:18080->8080/tcp", services in name order.
func ctlFmtResolvedPorts(byService map[string]*commonpb.ResolvedPortMappings) string {
	names := make([]string, 0, len(byService))
	for n := range byService {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		var ports []string
		for _, p := range byService[n].GetMappings() {
			ports = append(ports, fmt.Sprintf("%s->%d/%s", ctlPublished(p), p.GetTarget(), ctlFmtProto(p.GetProtocol())))
		}
		parts = append(parts, n+": "+strings.Join(ports, " "))
	}
	return strings.Join(parts, "; ")
}

// ctlPublished renders where a resolved port is published: its url without
// the scheme ("tcp://127.0.0.1:18080" → "127.0.0.1:18080"), the url and the
// published port if the url is a bare host, or just the port.
func ctlPublished(p *commonpb.ResolvedPortMapping) string {
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

// ctlFmtProto renders a protocol family as "tcp", "udp" or "any".
func ctlFmtProto(p commonpb.ProtocolFamily) string { return strings.ToLower(p.String()) }

// ctlFmtPortMapping renders a requested port mapping as
// "127.0.0.1:18080->8080/tcp" (host port "*" for ephemeral, "a-b" for a
// range).
func ctlFmtPortMapping(pm *commonpb.PortMapping) string {
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
	return fmt.Sprintf("%s->%d/%s", host, pm.GetContainerPort(), ctlFmtProto(pm.GetProtocol()))
}

// ctlFmtService renders one service of a job on one line.
func ctlFmtService(s *commonpb.Service) string {
	parts := []string{s.GetName()}
	if u := s.GetDocker().GetContainerUrl().GetUrl(); u != "" {
		parts = append(parts, "image="+u)
	}
	if s.GetCommand() != "" {
		parts = append(parts, "command="+strconv.Quote(s.GetCommand()))
	}
	restart := ctlEnum(s.GetRestart().String(), "")
	if s.GetRestart() != commonpb.Service_NEVER && s.GetRestartCount() > 0 {
		restart += fmt.Sprintf(" (%d in %ds)", s.GetRestartCount(), s.GetRestartPeriod())
	}
	parts = append(parts, "restart="+restart)
	var ports []string
	for _, pm := range s.GetParameters().GetPortMappings() {
		ports = append(ports, ctlFmtPortMapping(pm))
	}
	if len(ports) > 0 {
		parts = append(parts, "ports="+strings.Join(ports, ","))
	}
	if len(s.GetDependsOn()) > 0 {
		parts = append(parts, "depends-on="+strings.Join(s.GetDependsOn(), ","))
	}
	return strings.Join(parts, "  ")
}

// ctlHistoryEntry renders one history entry as its time and a description.
func ctlHistoryEntry(h *managerpb.JobHistoryEntry) (*timestamppb.Timestamp, string) {
	switch e := h.GetHistoryEntry().(type) {
	case *managerpb.JobHistoryEntry_JobCreated:
		return e.JobCreated.GetTimestamp(), "created"
	case *managerpb.JobHistoryEntry_JobUpdated:
		return e.JobUpdated.GetTimestamp(), "updated"
	case *managerpb.JobHistoryEntry_JobProvisioned:
		p := e.JobProvisioned
		return p.GetTimestamp(), fmt.Sprintf("provisioned role=%s node=%s", p.GetRole(), ctlNodeOf(p.GetNodeMetadata()))
	case *managerpb.JobHistoryEntry_JobRunning:
		r := e.JobRunning
		s := fmt.Sprintf("running role=%s node=%s", r.GetRole(), ctlNodeOf(r.GetNodeMetadata()))
		if len(r.GetServicePortMappings()) > 0 {
			s += " ports=" + ctlFmtResolvedPorts(r.GetServicePortMappings())
		}
		return r.GetTimestamp(), s
	case *managerpb.JobHistoryEntry_JobStopping:
		s := e.JobStopping
		return s.GetTimestamp(), fmt.Sprintf("stopping role=%s node=%s reason=%s",
			s.GetRole(), ctlNodeOf(s.GetNodeMetadata()), ctlEnum(s.GetReason().String(), "JOB_STOPPED_"))
	case *managerpb.JobHistoryEntry_JobStopped:
		s := e.JobStopped
		return s.GetTimestamp(), fmt.Sprintf("stopped role=%s node=%s", s.GetRole(), ctlNodeOf(s.GetNodeMetadata()))
	case *managerpb.JobHistoryEntry_JobCompleted:
		return e.JobCompleted.GetTimestamp(), "completed"
	}
	return nil, "unknown history entry"
}

// ctlJobState renders a job state ("pre", "active", "post").
func ctlJobState(s managerpb.Job_JobState) string { return ctlEnum(s.String(), "") }
