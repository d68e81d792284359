package gateway

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Limits on how many of each repeated part a job may have
// (docs/design/security.md, "Limits"). The 1 MiB bound on a job's encoding
// (maxJobBytes) caps memory; these cap the work a single definition makes
// every reader and every worker do (a dependsOn graph, one container per
// service, one port reservation per mapping) and keep the error an
// operator sees naming the list, not the byte size. Each is several times
// what any real job has used.
const (
	maxJobTags         = 128
	maxJobServices     = 64
	maxServiceDeps     = maxJobServices + 1 // every other service, and norsk-media
	maxPortMappings    = 256
	maxEnvVars         = 512
	maxVolumeMounts    = 128
	maxCPUSet          = 1024
	maxWriteFiles      = 256
	maxWriteFileTarget = maxJobServices + 1
	maxJobVolumes      = 128
	maxSecurityGroups  = 32
)

// checkCount refuses a list longer than max: InvalidArgument naming field,
// the count and the limit.
func checkCount(field string, n, max int) error {
	if n > max {
		return invalid(field, "has %d entries; the limit is %d", n, max)
	}
	return nil
}

// checkJobCounts applies the count limits above to a job definition
// (validateJob calls it before walking the lists).
func checkJobCounts(j *managerpb.Job) error {
	for _, c := range []struct {
		field  string
		n, max int
	}{
		{"job.tags", len(j.GetTags()), maxJobTags},
		{"job.product_template_parameters", len(j.GetProductTemplateParameters()), maxJobTags},
		{"job.services", len(j.GetServices()), maxJobServices},
		{"job.write_files", len(j.GetWriteFiles()), maxWriteFiles},
		{"job.volumes", len(j.GetVolumes()), maxJobVolumes},
		{"job.extra_security_groups", len(j.GetExtraSecurityGroups()), maxSecurityGroups},
		{"job.norsk_cpu_list", len(j.GetNorskCpuList()), maxCPUSet},
	} {
		if err := checkCount(c.field, c.n, c.max); err != nil {
			return err
		}
	}
	for i, svc := range j.GetServices() {
		f := fmt.Sprintf("job.services[%d]", i)
		if err := checkCount(f+".dependsOn", len(svc.GetDependsOn()), maxServiceDeps); err != nil {
			return err
		}
		if err := checkParamCounts(f+".parameters", svc.GetParameters()); err != nil {
			return err
		}
	}
	for i, wf := range j.GetWriteFiles() {
		if err := checkCount(fmt.Sprintf("job.write_files[%d].services", i), len(wf.GetServices()), maxWriteFileTarget); err != nil {
			return err
		}
	}
	return checkParamCounts("job.norsk_service_parameters", j.GetNorskServiceParameters())
}

// checkParamCounts applies the count limits to one ServiceParameters.
func checkParamCounts(field string, p *commonpb.ServiceParameters) error {
	if err := checkCount(field+".port_mappings", len(p.GetPortMappings()), maxPortMappings); err != nil {
		return err
	}
	if err := checkCount(field+".environment_variables", len(p.GetEnvironmentVariables()), maxEnvVars); err != nil {
		return err
	}
	if err := checkCount(field+".volume_mounts", len(p.GetVolumeMounts()), maxVolumeMounts); err != nil {
		return err
	}
	return checkCount(field+".cpu_set", len(p.GetCpuSet()), maxCPUSet)
}
