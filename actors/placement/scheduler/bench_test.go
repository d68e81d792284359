package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// benchFleet is a fleet of n nodes in three zones and two tiers (a third
// cheap, the rest dear), 16 units and 16 cores each, every node with ten
// placed instances of 1 unit (every other one pinning a core), and a backup
// ask that uses every filter kind: tiers, a cloud constraint, a capability,
// separate_from, cores, and node+zone anti-affinity.
func benchFleet(n int) ([]Node, []Placed, Ask) {
	nodes := make([]Node, n)
	var placed []Placed
	for i := range nodes {
		id := NodeID(fmt.Sprintf("node-%05d", i))
		tier := "dear"
		if i%3 == 0 {
			tier = "cheap"
		}
		nodes[i] = Node{
			ID: id, Online: true, Zone: fmt.Sprint("z", i%3), Cloud: managerpb.Cloud_CLOUD_CLUSTER,
			Tags: map[string]string{"tier": tier, "pool": "live"}, Capabilities: map[string]string{"sdi": "4"},
			Capacity: 16, Cores: coreRange(0, 16),
		}
		for k := range 10 {
			p := Placed{Job: JobID(fmt.Sprintf("job-%05d-%d", i, k)), Role: RolePrimary, Node: id, Capacity: 1}
			if k%2 == 0 {
				p.Cores = []int{k}
			}
			placed = append(placed, p)
		}
	}
	a := Ask{
		Job: "bun.1.enc", Role: RoleBackup, Pool: "live",
		Requirements: Requirements{Capacity: 2, Cores: 2, Capabilities: []Capability{{"sdi", "4"}}},
		Constraints:  Constraints{Cloud: managerpb.Cloud_CLOUD_CLUSTER},
		Tiers: []Tier{
			{Name: "cheap", Selector: map[string]string{"pool": "live", "tier": "cheap"}},
			{Name: "dear", Selector: map[string]string{"pool": "live", "tier": "dear"}},
		},
		SeparateFrom: []JobID{"job-00003-1", "job-00006-2"},
		Peer:         &Peer{Node: "node-00000", Zone: "z0", Cloud: managerpb.Cloud_CLOUD_CLUSTER},
		AntiAffinity: AntiAffinity{Node: true, Zone: true},
	}
	return nodes, placed, a
}

// BenchmarkSelect is one decision over a view already built (the engine
// keeps its view between decisions of a pass). It reports the p99 of the
// iterations as p99-ns/op next to the mean.
func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes, placed, a := benchFleet(n)
			v, err := NewView(nodes, placed)
			if err != nil {
				b.Fatal(err)
			}
			benchTimed(b, func() {
				if _, err := v.Select(a); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkViewAndSelect builds the view from the records and then decides:
// the cost when the engine rebuilds its view for every decision.
func BenchmarkViewAndSelect(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes, placed, a := benchFleet(n)
			benchTimed(b, func() {
				v, err := NewView(nodes, placed)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := v.Select(a); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func benchTimed(b *testing.B, f func()) {
	b.Helper()
	b.ReportAllocs()
	durs := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		f()
		durs = append(durs, time.Since(start))
	}
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns/op")
}
