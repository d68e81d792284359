package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// tierProvisioner renders a tier's provisioner for `pool get`: the
// provider, where, and the instance types with their capacity units;
// "-" for a tier without one.
func tierProvisioner(t *managerpb.PoolTier) string {
	types := func(its ...*managerpb.TierInstanceType) string {
		parts := make([]string, len(its))
		for i, it := range its {
			parts[i] = fmt.Sprintf("%s(%du)", it.GetInstanceType(), it.GetCapacity())
		}
		return strings.Join(parts, ",")
	}
	switch p := t.GetProvisioner().(type) {
	case *managerpb.PoolTier_Aws:
		where := p.Aws.GetRegion()
		if zs := p.Aws.GetAvailabilityZones(); len(zs) > 0 {
			where = strings.Join(zs, ",")
		}
		return fmt.Sprintf("aws %s %s", where, types(p.Aws.GetInstanceTypes()...))
	case *managerpb.PoolTier_Oci:
		return fmt.Sprintf("oci %s %s", strings.Join(p.Oci.GetAvailabilityDomains(), ","), types(p.Oci.GetShape()))
	case *managerpb.PoolTier_Mock:
		return fmt.Sprintf("mock %du", p.Mock.GetOffering().GetCapacity())
	}
	return "-"
}

// tierLinger renders a tier's linger ("-" without a provisioner).
func tierLinger(t *managerpb.PoolTier) string {
	if t.GetProvisioner() == nil {
		return "-"
	}
	return (time.Duration(t.GetLingerSeconds()) * time.Second).String()
}

// tierNodes renders what the engine created for tier ("2 running, 1
// creating"; "-" without a provisioner).
func tierNodes(p *managerpb.Pool, t *managerpb.PoolTier) string {
	if t.GetProvisioner() == nil {
		return "-"
	}
	for _, st := range p.GetTierStatus() {
		if st.GetTier() == t.GetName() {
			return fmt.Sprintf("%d running, %d creating", st.GetNodesRunning(), st.GetNodesCreating())
		}
	}
	return "0 running, 0 creating"
}

// writeBackoffs renders the offerings kept out after capacity errors, if
// any.
func writeBackoffs(w io.Writer, p *managerpb.Pool) error {
	var rows [][]string
	for _, st := range p.GetTierStatus() {
		for _, b := range st.GetBackedOff() {
			rows = append(rows, []string{st.GetTier(), b.GetOffering(), b.GetUntil().AsTime().UTC().Format(time.RFC3339), b.GetReason()})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "Offerings backed off after capacity errors:\n"); err != nil {
		return err
	}
	return ctlTable(w, []string{"TIER", "OFFERING", "UNTIL", "WHY"}, rows)
}

// writeTierTemplates renders the product templates the tiers declare for
// the nodes they create (PoolTier.templates), if any tier declares some.
func writeTierTemplates(w io.Writer, p *managerpb.Pool) error {
	var rows [][]string
	for _, t := range p.GetTiers() {
		if len(t.GetTemplates()) > 0 {
			rows = append(rows, []string{t.GetName(), noderesources.DescribeTemplates(t.GetTemplates())})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "Product templates the tiers' new nodes offer:\n"); err != nil {
		return err
	}
	return ctlTable(w, []string{"TIER", "TEMPLATES"}, rows)
}
