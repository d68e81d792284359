package gateway

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Limits on identifiers and names (bytes of UTF-8), and on a job.
const (
	maxIDLen   = 256
	maxNameLen = 256
	maxTagLen  = 1024
	// maxJobBytes bounds a job definition's encoding: the job grain keeps a
	// record with the definition and its history within 1.5 MiB.
	maxJobBytes = 1 << 20
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
	if i := strings.IndexFunc(s, invisible); i >= 0 {
		return invalid(field, "contains an invisible or formatting character (U+%04X) at byte %d", []rune(s[i:])[0], i)
	}
	return nil
}

// invisible reports characters that make two different names look alike:
// formatting characters (zero-width, bidirectional overrides) and line or
// paragraph separators.
func invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// maxNewIDLen bounds the id of a new job or node: room for every
// bundle-derived job id, "<bundle id>.<replica>.<job name>" (128 + 1 + 1 + 1
// + 64 = 195 bytes), and still well under the 255-byte file-name limit of
// common file systems.
const maxNewIDLen = 200

// newIDRe is the form of the id of a new job or node
// (docs/design/jobs.md#ids): letters, digits, '.', '_' and '-', starting
// with a letter or digit. The same characters as bundle ids and Docker
// object names; safe in a store key, a grain identity, a file name and a
// URL path without quoting, and unable to look like another id (no white
// space, no invisible characters, no case of "." or "..").
var newIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// checkNewID validates the id of a job or node being created
// (CreateJob, CreateMockNode, CreateAwsNode, CreateOciNode): 1 to
// maxNewIDLen bytes of newIDRe. The error is InvalidArgument naming the
// field and the rule.
func checkNewID(field, id string) error {
	switch {
	case id == "":
		return invalid(field, "must not be empty")
	case len(id) > maxNewIDLen:
		return invalid(field, "is %d bytes long, the limit is %d", len(id), maxNewIDLen)
	case !newIDRe.MatchString(id):
		return invalid(field, "%q: an id is letters, digits, '.', '_' and '-', starting with a letter or digit", id)
	}
	return nil
}

// checkID validates the id of an existing job or node named by a request
// (JobById, StartJob, TerminateNode, …): checkText rules, and no '/' (ids
// are grain identities and store keys). It is looser than checkNewID on
// purpose: a store written before ids were restricted may hold ids with
// other characters, and those must stay reachable (to read, stop and
// delete them); an id that was never created is simply NotFound.
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
	if id == "." || id == ".." {
		return invalid(field, "%q is not a usable id", id)
	}
	return nil
}

// newJobID validates the id of a job being created (checkNewID).
func newJobID(field string, id *commonpb.JobId) (string, error) {
	return id.GetJobId(), checkNewID(field, id.GetJobId())
}

// newNodeID validates the id of a node being created (checkNewID).
func newNodeID(field string, id *commonpb.NodeId) (string, error) {
	return id.GetNodeId(), checkNewID(field, id.GetNodeId())
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

// mediaServiceName is the service name of the Norsk Media container a
// Docker worker adds to every job when it has media images
// (docs/design/worker-docker-runtime.md): services may depend on it and
// files may name it, though the job does not list it; a worker without
// media images refuses such a job.
const mediaServiceName = "norsk-media"

// validateJob checks a job definition of CreateJob/UpdateJob. The opaque
// JSON fields (manager_configuration, launch_config_json,
// template_launch_defaults_json) are stored verbatim and never inspected.
func validateJob(j *managerpb.Job) error {
	if n := proto.Size(j); n > maxJobBytes {
		return invalid("job", "is %d bytes encoded; the limit is %d (1 MiB)", n, maxJobBytes)
	}
	if err := checkJobCounts(j); err != nil {
		return err
	}
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
			if !names[dep] && dep != mediaServiceName {
				return invalid(fmt.Sprintf("job.services[%d].dependsOn", i), "unknown service %q", dep)
			}
			if dep == svc.GetName() {
				return invalid(fmt.Sprintf("job.services[%d].dependsOn", i), "service %q depends on itself", dep)
			}
		}
	}
	if cycle := dependencyCycle(j.GetServices()); cycle != nil {
		return invalid("job.services", "dependsOn has a cycle: %s", strings.Join(cycle, " → "))
	}
	if err := validateParams("job.norsk_service_parameters", j.GetNorskServiceParameters()); err != nil {
		return err
	}
	if err := validateAutoPlacement(j); err != nil {
		return err
	}
	if err := validateJobUpdateStrategy(j); err != nil {
		return err
	}
	if err := validateProductTemplate(j); err != nil {
		return err
	}
	if j.GetAutoPlacement() != nil && len(j.GetNorskCpuList()) > 0 {
		return invalid("job.norsk_cpu_list", "cannot be set on a job with auto_placement: the placement engine picks the node and its cores; "+
			"ask for whole cores with auto_placement.requirements.required_cores (docs/design/placement.md, Cores)")
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
		for _, name := range wf.GetServices() {
			if !names[name] && name != mediaServiceName {
				return invalid(fmt.Sprintf("job.write_files[%d].services", i), "unknown service %q", name)
			}
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

// dependencyCycle returns the services of a dependsOn cycle (first service
// repeated at the end), or nil. Unknown dependencies are ignored.
func dependencyCycle(svcs []*commonpb.Service) []string {
	deps := map[string][]string{}
	for _, s := range svcs {
		deps[s.GetName()] = s.GetDependsOn()
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		switch state[n] {
		case onPath:
			for i, p := range path {
				if p == n {
					return append(append([]string{}, path[i:]...), n)
				}
			}
		case done:
			return nil
		}
		state[n] = onPath
		path = append(path, n)
		for _, d := range deps[n] {
			if _, known := deps[d]; known {
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, s := range svcs {
		if c := visit(s.GetName()); c != nil {
			return c
		}
	}
	return nil
}
