package worker

import "github.com/norsk-oss/norsk-manager/worker/internal/cpuset"

// AllowedCPUs returns the CPUs this process may run on (its affinity mask,
// narrowed by a cgroup cpuset, taskset or systemd's CPUAffinity), ascending:
// the default of the cores a worker offers to pinned jobs (norsk-ctl
// --cores) and the bound of any it is given. Call it before anything
// pins a thread. On systems without an affinity call it is every CPU.
func AllowedCPUs() ([]uint32, error) { return cpuset.Allowed() }
