package scheduler

import "fmt"

// capacityFilter removes nodes whose free capacity (their capacity less
// what the placed instances hold) is below what the job and its co-located
// members need together (issue 11 §3). It is always in the chain: a job
// needing 0 units still needs a node that is not over-committed.
type capacityFilter struct {
	need float64
}

func (capacityFilter) name() string   { return FilterCapacity }
func (capacityFilter) kind() Kind     { return KindExhausted }
func (f capacityFilter) want() string { return fmt.Sprintf("%g units", f.need) }

func (f capacityFilter) check(c *candidate) (bool, string) {
	return c.node.Capacity-unfixed(c.usage.capacity)+epsilon >= f.need, ""
}

// gpuCapacityFilter removes nodes whose free GPU capacity is below the need.
type gpuCapacityFilter struct {
	need float64
}

func (gpuCapacityFilter) name() string   { return FilterGPUCapacity }
func (gpuCapacityFilter) kind() Kind     { return KindExhausted }
func (f gpuCapacityFilter) want() string { return fmt.Sprintf("%g gpu units", f.need) }

func (f gpuCapacityFilter) check(c *candidate) (bool, string) {
	return c.node.GPUCapacity-unfixed(c.usage.gpu)+epsilon >= f.need, ""
}

// coresFilter removes nodes with fewer whole cores free (not pinned to a
// placed instance) than the job and its co-located members pin together.
// The ids are assigned for the chosen node only (assignCores).
type coresFilter struct {
	need int
}

func (coresFilter) name() string   { return FilterCores }
func (coresFilter) kind() Kind     { return KindExhausted }
func (f coresFilter) want() string { return fmt.Sprintf("%d cores", f.need) }

func (f coresFilter) check(c *candidate) (bool, string) {
	return len(c.usage.cores)-c.usage.coresUsed >= f.need, ""
}

// assignCores takes the lowest free core ids of node n (u its usage) for
// each count in order, without overlap with the placed instances or each
// other, and marks nothing: the caller adds the decision to the view. The
// coresFilter has checked that enough are free.
func assignCores(n *Node, u *usage, counts []int) [][]int {
	out := make([][]int, len(counts))
	next := 0
	for i, want := range counts {
		for want > 0 && next < len(u.cores) {
			if u.cores[next] == 0 {
				out[i] = append(out[i], n.Cores[next])
				want--
			}
			next++
		}
	}
	return out
}
