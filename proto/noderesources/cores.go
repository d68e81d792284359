package noderesources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCoreID bounds a core id a worker may report or a job may be pinned
// to: Linux's largest NR_CPUS is 8192, so ids run 0..8191.
const MaxCoreID = 8191

// ParseCPUList parses a CPU list in the kernel's format (cpuset(7) "List
// format", as taskset -c and /proc/self/status Cpus_allowed_list write
// it): comma-separated ids and inclusive ranges, e.g. "0-3,8,10-11".
// Spaces around items are ignored. It returns the ids ascending without
// duplicates, or an error naming the item that is not an id or a range
// lo-hi with lo ≤ hi ≤ MaxCoreID. An empty list is an error: a worker
// that offers no core has no --cores to give.
func ParseCPUList(s string) ([]uint32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty cpu list: want ids and ranges like 0-3,8")
	}
	var out []uint32
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, errA := parseCoreID(lo)
		b, errB := a, error(nil)
		if isRange {
			b, errB = parseCoreID(hi)
		}
		switch {
		case errA != nil || errB != nil:
			return nil, fmt.Errorf("%q is not a cpu id or range (ids 0-%d, ranges like 2-7)", item, MaxCoreID)
		case b < a:
			return nil, fmt.Errorf("range %q runs backwards", item)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseCoreID(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || v > MaxCoreID {
		return 0, fmt.Errorf("bad cpu id %q", s)
	}
	return uint32(v), nil
}

// FormatCPUList writes ids as a comma-separated list of single ids in
// the order given, "0,2,3" (the NORSK_CPU_LIST a process-runtime service
// gets; Docker's --cpuset-cpus accepts it too); "" for none.
func FormatCPUList(ids []uint32) string {
	parts := make([]string, len(ids))
	for i, c := range ids {
		parts[i] = strconv.FormatUint(uint64(c), 10)
	}
	return strings.Join(parts, ",")
}

// FormatCPURanges writes ids (ascending, no duplicates) in the kernel's
// list format with ranges, "0-3,8", for operators (node get, logs).
func FormatCPURanges(ids []uint32) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(uint64(ids[i]), 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// checkCores checks NodeResources.cores: ascending, each at most once,
// each ≤ MaxCoreID.
func checkCores(cores []uint32) error {
	for i, c := range cores {
		switch {
		case c > MaxCoreID:
			return &FieldError{Field: "cores", Reason: fmt.Sprintf("cpu %d: ids run 0-%d", c, MaxCoreID)}
		case i > 0 && c <= cores[i-1]:
			return &FieldError{Field: "cores", Reason: fmt.Sprintf("cpu %d after %d: want ascending ids, each once", c, cores[i-1])}
		}
	}
	return nil
}
