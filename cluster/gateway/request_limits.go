package gateway

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// fieldLimit bounds one repeated or map field of a request: at most count
// entries, and at most bytes in all (fieldBytes: a string's or bytes'
// length, a message's encoded size, a scalar's width, a map entry's key
// and value).
type fieldLimit struct{ count, bytes int }

// Limits on the maps and lists of requests that no per-message rule bounds
// more tightly (docs/design/security.md, "Limits"). Tags on any request
// share one: a node's tags are copied into every ListNodes and
// ListClusterNodes answer, and 3,800 tags of 1 KB on five nodes made those
// listings fail for every caller (issue 21 §3).
const (
	maxRequestTags      = maxJobTags // entries of one tags map or node selector
	maxRequestTagsBytes = 64 << 10   // keys and values of one tags map
	maxNameListBytes    = 16 << 10   // a list of names (zones, groups, services)
	// defaultFieldLimit's numbers bound a repeated field the table below
	// does not name (TestRequestLimits_EveryFieldHasOne keeps it empty).
	defaultFieldCount = 1024
	defaultFieldBytes = 1 << 20
)

// requestFieldLimits is the limit of every repeated and map field that a
// Manager request (any method's input, and every message nested in one)
// can carry, by the field's full name. checkRequestLimits applies it to
// each request as it is decoded, before any handler or interceptor runs;
// TestRequestLimits_EveryFieldHasOne fails for a field added without one.
// Where a message has its own count rule (validate_counts.go, pools,
// bundles, noderesources), the count here is that rule's, so the caller
// sees the same number either way.
var requestFieldLimits = map[protoreflect.FullName]fieldLimit{
	// Jobs (validate_counts.go), bounded in bytes by the job's 1 MiB.
	"norsk.api.manager.Job.tags":                                   {maxJobTags, maxRequestTagsBytes},
	"norsk.api.manager.Job.product_template_parameters":            {maxJobTags, maxJobBytes},
	"norsk.api.manager.Job.services":                               {maxJobServices, maxJobBytes},
	"norsk.api.manager.Job.write_files":                            {maxWriteFiles, maxJobBytes},
	"norsk.api.manager.Job.volumes":                                {maxJobVolumes, maxJobBytes},
	"norsk.api.manager.Job.extra_security_groups":                  {maxSecurityGroups, maxNameListBytes},
	"norsk.api.manager.Job.norsk_cpu_list":                         {maxCPUSet, maxCPUSet * 4},
	"norsk.api.common.Service.dependsOn":                           {maxServiceDeps, maxServiceDeps * maxNameLen},
	"norsk.api.common.ServiceParameters.port_mappings":             {maxPortMappings, maxJobBytes},
	"norsk.api.common.ServiceParameters.environment_variables":     {maxEnvVars, maxJobBytes},
	"norsk.api.common.ServiceParameters.volume_mounts":             {maxVolumeMounts, maxJobBytes},
	"norsk.api.common.ServiceParameters.cpu_set":                   {maxCPUSet, maxCPUSet * 4},
	"norsk.api.common.WriteFile.services":                          {maxWriteFileTarget, maxWriteFileTarget * maxNameLen},
	"norsk.api.manager.JobRequirements.required_capabilities":      {noderesources.MaxCapabilities, maxNameListBytes * 4},
	"norsk.api.manager.JobSearchRequest.job_filter":                {persistence.MaxJobFilters, persistence.MaxJobFilters * 4 << 10},
	"norsk.api.manager.Bundle.jobs":                                {maxBundleJobs, maxBundleBytes},
	"norsk.api.manager.BundleJobSpec.co_locate_with":               {maxBundleJobs, maxBundleJobs * maxJobNameLen},
	"norsk.api.manager.BundleJobSpec.separate_from":                {maxBundleJobs, maxBundleJobs * maxJobNameLen},
	"norsk.api.manager.RegisterClusterNodeRequest.tags":            {maxRequestTags, maxRequestTagsBytes},
	"norsk.api.manager.CreateMockNodeRequest.tags":                 {maxRequestTags, maxRequestTagsBytes},
	"norsk.api.manager.CreateAwsNodeRequest.tags":                  {maxCloudTags, maxRequestTagsBytes},
	"norsk.api.manager.CreateAwsNodeRequest.extra_security_groups": {maxSecurityGroups, maxNameListBytes},
	"norsk.api.manager.CreateOciNodeRequest.tags":                  {maxRequestTags, maxRequestTagsBytes},
	// A worker's registration (noderesources.Validate).
	"norsk.api.common.NodeResources.capabilities":    {noderesources.MaxCapabilities, noderesources.MaxCapabilities * 1024},
	"norsk.api.common.NodeResources.cores":           {noderesources.MaxCoreID + 1, (noderesources.MaxCoreID + 1) * 4},
	"norsk.api.common.NodeResources.templates":       {noderesources.MaxTemplates, 1 << 20}, // about 0.55 MB at the worst (noderesources)
	"norsk.api.common.ProductTemplateOffer.versions": {noderesources.MaxTemplateVersions, maxNameListBytes},
	// Pools (validate_pools.go, validate_provisioner.go). tier_status is
	// an output the manager fills in; a request may echo what it read.
	"norsk.api.manager.Pool.tiers":                               {maxPoolTiers, 1 << 20},
	"norsk.api.manager.Pool.tier_status":                         {maxPoolTiers, 256 << 10},
	"norsk.api.manager.PoolTierStatus.backed_off":                {maxTierOfferings * 4, 64 << 10},
	"norsk.api.manager.PoolTier.node_selector":                   {maxSelectorTags, maxRequestTagsBytes},
	"norsk.api.manager.PoolTier.templates":                       {noderesources.MaxTemplates, 64 << 10},
	"norsk.api.manager.AwsTierProvisioner.instance_types":        {maxTierOfferings, 64 << 10},
	"norsk.api.manager.AwsTierProvisioner.availability_zones":    {maxTierOfferings, maxNameListBytes},
	"norsk.api.manager.AwsTierProvisioner.extra_security_groups": {maxSecurityGroups, maxNameListBytes},
	"norsk.api.manager.AwsTierProvisioner.tags":                  {maxCloudTags, maxRequestTagsBytes},
	"norsk.api.manager.OciTierProvisioner.availability_domains":  {maxTierOfferings, maxNameListBytes * 4},
	"norsk.api.manager.OciTierProvisioner.tags":                  {maxRequestTags, maxRequestTagsBytes},
	"norsk.api.manager.MockTierProvisioner.tags":                 {maxRequestTags, maxRequestTagsBytes},
}

// requestRoots names the root of a field path by the request's message
// ("job.tags", "bundle.jobs[0]…", "pool.tiers[1]…", as the validators
// name them); any other request's fields are named from their own name
// ("tags").
var requestRoots = map[protoreflect.FullName]string{
	"norsk.api.manager.Job":    "job",
	"norsk.api.manager.Bundle": "bundle",
	"norsk.api.manager.Pool":   "pool",
}

// checkRequestLimits applies requestFieldLimits to every repeated and map
// field of m, nested messages included, in field-number order: the first
// over its limit is an InvalidArgument naming it with its path
// ("tags: has 3800 entries; the limit is 128", "job.services[0].parameters
// .port_mappings: …", "tags: is 3891200 bytes in all; the limit is
// 65536"). A field not in the table gets defaultFieldCount and
// defaultFieldBytes.
func checkRequestLimits(m proto.Message) error {
	r := m.ProtoReflect()
	return walkLimits(requestRoots[r.Descriptor().FullName()], r)
}

func walkLimits(path string, m protoreflect.Message) error {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		p := joinPath(path, string(fd.Name()))
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			n, size := l.Len(), 0
			for j := range n {
				size += valueBytes(fd, l.Get(j))
			}
			if err := checkFieldLimit(p, fd, n, size); err != nil {
				return err
			}
			if fd.Message() != nil {
				for j := range n {
					if err := walkLimits(fmt.Sprintf("%s[%d]", p, j), l.Get(j).Message()); err != nil {
						return err
					}
				}
			}
		case fd.IsMap():
			mp := v.Map()
			size := 0
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				size += valueBytes(fd.MapKey(), k.Value()) + valueBytes(fd.MapValue(), v)
				return true
			})
			if err := checkFieldLimit(p, fd, mp.Len(), size); err != nil {
				return err
			}
			if fd.MapValue().Message() != nil {
				var err error
				mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					err = walkLimits(fmt.Sprintf("%s[%q]", p, k.String()), v.Message())
					return err == nil
				})
				if err != nil {
					return err
				}
			}
		case fd.Message() != nil:
			if err := walkLimits(p, v.Message()); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// checkFieldLimit refuses n entries of size bytes in field fd (named p)
// beyond its limit.
func checkFieldLimit(p string, fd protoreflect.FieldDescriptor, n, size int) error {
	lim, ok := requestFieldLimits[fd.FullName()]
	if !ok {
		lim = fieldLimit{defaultFieldCount, defaultFieldBytes}
	}
	if err := checkCount(p, n, lim.count); err != nil {
		return err
	}
	if size > lim.bytes {
		return invalid(p, "is %d bytes in all; the limit is %d", size, lim.bytes)
	}
	return nil
}

// valueBytes is what one value of fd weighs: a string's or bytes' length,
// a message's encoded size, a scalar's width.
func valueBytes(fd protoreflect.FieldDescriptor, v protoreflect.Value) int {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return len(v.String())
	case protoreflect.BytesKind:
		return len(v.Bytes())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return proto.Size(v.Message().Interface())
	case protoreflect.BoolKind:
		return 1
	case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind,
		protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return 8
	default: // 32-bit integers, enums, floats
		return 4
	}
}
