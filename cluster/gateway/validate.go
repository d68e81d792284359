package gateway

import (
	"fmt"
	"net"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Limits on identifiers and names (bytes of UTF-8).
const (
	maxIDLen   = 256
	maxNameLen = 256
	maxTagLen  = 1024
)

// invalid returns an InvalidArgument status naming the field.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// checkText validates a free-form identifier or name: non-empty, valid
// UTF-8, no control characters, at most max bytes.
func checkText(field, s string, max int) error {
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > max:
		return invalid(field, "is %d bytes long, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return invalid(field, "contains a control character at byte %d", i)
	}
	return nil
}

// checkID validates a job or node id: checkText rules, and no '/' (ids are
// grain identities and store keys).
func checkID(field, id string) error {
	if err := checkText(field, id, maxIDLen); err != nil {
		return err
	}
	if strings.Contains(id, "/") {
		return invalid(field, "must not contain '/'")
	}
	if strings.TrimSpace(id) != id {
		return invalid(field, "must not start or end with white space")
	}
	return nil
}

func jobID(field string, id *commonpb.JobId) (string, error) {
	return id.GetJobId(), checkID(field, id.GetJobId())
}

func nodeID(field string, id *commonpb.NodeId) (string, error) {
	return id.GetNodeId(), checkID(field, id.GetNodeId())
}

func checkTags(field string, tags map[string]string) error {
	for k, v := range tags {
		if err := checkText(field+" key", k, maxTagLen); err != nil {
			return err
		}
		if len(v) > maxTagLen || !utf8.ValidString(v) {
			return invalid(fmt.Sprintf("%s[%q]", field, k), "value must be valid UTF-8 of at most %d bytes", maxTagLen)
		}
	}
	return nil
}

// validateJob checks a job definition of CreateJob/UpdateJob. The opaque
// JSON fields (manager_configuration, launch_config_json,
// template_launch_defaults_json) are stored verbatim and never inspected.
func validateJob(j *managerpb.Job) error {
	if err := checkTags("job.tags", j.GetTags()); err != nil {
		return err
	}
	if ts := j.GetStartDateTime(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return invalid("job.start_date_time", "%v", err)
		}
	}
	names := map[string]bool{}
	for i, svc := range j.GetServices() {
		f := fmt.Sprintf("job.services[%d]", i)
		if err := checkText(f+".name", svc.GetName(), maxNameLen); err != nil {
			return err
		}
		if names[svc.GetName()] {
			return invalid(f+".name", "duplicate service name %q", svc.GetName())
		}
		names[svc.GetName()] = true
		if err := validateParams(f+".parameters", svc.GetParameters()); err != nil {
			return err
		}
	}
	for i, svc := range j.GetServices() {
		for _, dep := range svc.GetDependsOn() {
			if !names[dep] {
				return invalid(fmt.Sprintf("job.services[%d].dependsOn", i), "unknown service %q", dep)
			}
			if dep == svc.GetName() {
				return invalid(fmt.Sprintf("job.services[%d].dependsOn", i), "service %q depends on itself", dep)
			}
		}
	}
	if err := validateParams("job.norsk_service_parameters", j.GetNorskServiceParameters()); err != nil {
		return err
	}
	for i, wf := range j.GetWriteFiles() {
		f := fmt.Sprintf("job.write_files[%d].path", i)
		p := wf.GetPath()
		if err := checkText(f, p, 4096); err != nil {
			return err
		}
		if clean := path.Clean(p); clean == ".." || strings.HasPrefix(clean, "../") {
			return invalid(f, "%q escapes the job directory", p)
		}
		if m := wf.GetMode(); m != nil && m.GetValue() > 0o7777 {
			return invalid(fmt.Sprintf("job.write_files[%d].mode", i), "%o is not a file mode", m.GetValue())
		}
	}
	return nil
}

func validateParams(field string, p *commonpb.ServiceParameters) error {
	for i, pm := range p.GetPortMappings() {
		f := fmt.Sprintf("%s.port_mappings[%d]", field, i)
		if pm.GetContainerPort() == 0 || pm.GetContainerPort() > 65535 {
			return invalid(f+".container_port", "%d is not a port (1-65535)", pm.GetContainerPort())
		}
		switch hp := pm.GetHostPort().(type) {
		case *commonpb.PortMapping_Specific:
			if hp.Specific.GetPort() == 0 || hp.Specific.GetPort() > 65535 {
				return invalid(f+".specific.port", "%d is not a port (1-65535)", hp.Specific.GetPort())
			}
		case *commonpb.PortMapping_Range:
			lo, hi := hp.Range.GetMinPort(), hp.Range.GetMaxPort()
			if lo == 0 || hi > 65535 || lo > hi {
				return invalid(f+".range", "[%d, %d] is not a port range within 1-65535", lo, hi)
			}
		}
		if a := pm.GetHostAddress(); a != "" && net.ParseIP(a) == nil {
			return invalid(f+".host_address", "%q is not an IP address", a)
		}
	}
	for i, ev := range p.GetEnvironmentVariables() {
		if err := checkText(fmt.Sprintf("%s.environment_variables[%d].name", field, i), ev.GetName(), maxNameLen); err != nil {
			return err
		}
		if strings.Contains(ev.GetName(), "=") {
			return invalid(fmt.Sprintf("%s.environment_variables[%d].name", field, i), "must not contain '='")
		}
	}
	return nil
}

// checkRole validates a role: a free string (primary, backup, …).
func checkRole(role string) error { return checkText("role", role, maxNameLen) }

// checkDialBack validates a worker's dial-back address and port.
func checkDialBack(address string, port uint32) error {
	if err := checkText("address", address, 253); err != nil {
		return err
	}
	if strings.ContainsAny(address, " /:") && net.ParseIP(address) == nil {
		return invalid("address", "%q is neither an IP address nor a host name", address)
	}
	if port == 0 || port > 65535 {
		return invalid("port", "%d is not a port (1-65535)", port)
	}
	return nil
}
