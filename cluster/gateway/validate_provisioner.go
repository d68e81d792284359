package gateway

import (
	"fmt"
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// Provisioner limits and defaults (docs/design/pools.md, "Provisioners").
const (
	maxTierOfferings = 16
	maxTierCapacity  = 1_000_000
	// DefaultLingerSeconds is the linger stored for a tier with a
	// provisioner that sets none: an engine-created node that ran no job
	// for 5 minutes is terminated (long enough to take the next job of a
	// schedule that restarts jobs, short enough not to pay for an idle
	// instance for long).
	DefaultLingerSeconds = 300
	maxLingerSeconds     = 7 * 24 * 60 * 60
)

// checkTierProvisioner checks the provisioner of tier t (field is
// "pool.tiers[i]") and its linger; a tier without a provisioner may not
// set a linger. Errors are InvalidArgument naming the field.
func checkTierProvisioner(field string, t *managerpb.PoolTier) error {
	if t.GetLingerSeconds() > maxLingerSeconds {
		return invalid(field+".linger_seconds", "is %d; it must be at most %d (a week; 0 for the default, %d)", t.GetLingerSeconds(), maxLingerSeconds, DefaultLingerSeconds)
	}
	if path, why := noderesources.TemplateOffersProblem(t.GetTemplates()); why != "" {
		return invalid(field+".templates"+path, "%s", why)
	}
	switch p := t.GetProvisioner().(type) {
	case nil:
		if t.GetLingerSeconds() != 0 {
			return invalid(field+".linger_seconds", "is set on a tier without a provisioner (aws, oci or mock): the engine releases only nodes it created")
		}
		if len(t.GetTemplates()) > 0 {
			return invalid(field+".templates", "is set on a tier without a provisioner (aws, oci or mock): it declares what the nodes the engine creates will offer, and this tier creates none")
		}
		return nil
	case *managerpb.PoolTier_Aws:
		if err := checkAwsTier(field+".aws", p.Aws); err != nil {
			return err
		}
		return checkInstanceTags(field+".aws.tags", p.Aws.GetTags(), t.GetNodeSelector())
	case *managerpb.PoolTier_Oci:
		return checkOciTier(field+".oci", p.Oci)
	case *managerpb.PoolTier_Mock:
		if err := checkTags(field+".mock.tags", p.Mock.GetTags()); err != nil {
			return err
		}
		return checkOffering(field+".mock.offering", p.Mock.GetOffering(), false)
	}
	return invalid(field, "unknown provisioner")
}

func checkAwsTier(field string, a *managerpb.AwsTierProvisioner) error {
	if r := a.GetRegion(); len(r) > maxNameLen || !isCloudName(r) || strings.ContainsAny(r, "._") {
		return invalid(field+".region", "%q is not a region name (like eu-west-2)", r)
	}
	if t := a.GetTemplate(); t.GetId() == "" && t.GetName() == "" {
		return invalid(field+".template", "a launch template id or name is required (it holds the image, network and role)")
	}
	if err := checkNames(field+".availability_zones", a.GetAvailabilityZones(), maxTierOfferings, false); err != nil {
		return err
	}
	for i, z := range a.GetAvailabilityZones() {
		// Every AWS zone name starts with its region's (eu-west-2a, a Local
		// Zone us-west-2-lax-1a): one of another region would fail every
		// launch of the offering.
		if !strings.HasPrefix(z, a.GetRegion()) {
			return invalid(fmt.Sprintf("%s.availability_zones[%d]", field, i), "%q is not a zone of region %s (zone names start with the region's, like %sa)", z, a.GetRegion(), a.GetRegion())
		}
	}
	if n := len(a.GetInstanceTypes()); n == 0 || n > maxTierOfferings {
		return invalid(field+".instance_types", "has %d entries; it must have 1 to %d, in order of preference", n, maxTierOfferings)
	}
	seen := map[string]int{}
	for i, it := range a.GetInstanceTypes() {
		f := fmt.Sprintf("%s.instance_types[%d]", field, i)
		if err := checkOffering(f, it, true); err != nil {
			return err
		}
		if j, dup := seen[it.GetInstanceType()]; dup {
			return invalid(f+".instance_type", "%q is also %s.instance_types[%d]", it.GetInstanceType(), field, j)
		}
		seen[it.GetInstanceType()] = i
	}
	if err := checkNames(field+".extra_security_groups", a.GetExtraSecurityGroups(), maxTierOfferings, true); err != nil {
		return err
	}
	return checkTags(field+".tags", a.GetTags())
}

// provisionedTags is the number of tags the engine adds to a node it
// creates (provisioner.PoolTag and TierTag).
const provisionedTags = 2

// checkInstanceTags checks that the tags of an instance the engine creates
// (the provisioner's, the tier's selector and provisionedTags) fit an EC2
// instance beside its node id tag.
func checkInstanceTags(field string, tags, selector map[string]string) error {
	n := len(tags) + provisionedTags
	for k := range selector {
		if _, dup := tags[k]; !dup {
			n++
		}
	}
	if n > maxCloudTags {
		return invalid(field, "with the tier's node_selector and the engine's 2 tags an instance would carry %d tags; EC2 takes %d besides the node id tag", n, maxCloudTags)
	}
	return nil
}

func checkOciTier(field string, o *managerpb.OciTierProvisioner) error {
	if n := len(o.GetAvailabilityDomains()); n == 0 {
		return invalid(field+".availability_domains", "at least one availability domain is required, in order of preference")
	}
	if err := checkNames(field+".availability_domains", o.GetAvailabilityDomains(), maxTierOfferings, true); err != nil {
		return err
	}
	if err := checkOffering(field+".shape", o.GetShape(), true); err != nil {
		return err
	}
	if err := checkText(field+".subnet", o.GetSubnet(), maxNameLen*4); err != nil {
		return err
	}
	switch strings.ToLower(o.GetArchitecture()) {
	case "", "x86_64", "amd64", "aarch64", "arm64":
	default:
		return invalid(field+".architecture", "%q is not x86_64 or aarch64", o.GetArchitecture())
	}
	return checkTags(field+".tags", o.GetTags())
}

// checkOffering checks an instance type (named: required and a cloud name)
// and its capacity (1..maxTierCapacity units; GPU at most as much).
func checkOffering(field string, it *managerpb.TierInstanceType, named bool) error {
	if it == nil {
		return invalid(field, "is required: what a created node offers (capacity units)")
	}
	if n := it.GetInstanceType(); named && (len(n) > maxNameLen || !isCloudName(n)) {
		return invalid(field+".instance_type", "%q is not an instance type or shape name", n)
	}
	if c := it.GetCapacity(); c < 1 || c > maxTierCapacity {
		return invalid(field+".capacity", "is %d; it must be 1 to %d (the capacity units a node of this type offers)", c, maxTierCapacity)
	}
	if g := it.GetGpuCapacity(); g > maxTierCapacity {
		return invalid(field+".gpu_capacity", "is %d; it must be at most %d", g, maxTierCapacity)
	}
	return nil
}

// checkNames checks a list of at most max distinct names (cloud names, or
// any text when text is set).
func checkNames(field string, names []string, max int, text bool) error {
	if len(names) > max {
		return invalid(field, "has %d entries, the limit is %d", len(names), max)
	}
	seen := map[string]bool{}
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case text:
			if err := checkText(f, n, maxNameLen*4); err != nil {
				return err
			}
		case len(n) > maxNameLen || !isCloudName(n):
			return invalid(f, "%q is not a zone name (like eu-west-2a)", n)
		}
		if seen[n] {
			return invalid(f, "%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// withLingerDefaults fills in the default linger of every tier with a
// provisioner that sets none, in place (tiers is a copy the caller owns).
func withLingerDefaults(tiers []*managerpb.PoolTier) {
	for _, t := range tiers {
		if t.GetProvisioner() != nil && t.GetLingerSeconds() == 0 {
			t.LingerSeconds = DefaultLingerSeconds
		}
	}
}
