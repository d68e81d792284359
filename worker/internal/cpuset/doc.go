// Package cpuset reads which CPUs this process may run on and starts
// child processes pinned to a CPU list (a job's norsk_cpu_list) from
// their first instruction. It is the worker's only user of
// sched_getaffinity/sched_setaffinity; on systems without them it reports
// every CPU and refuses to pin. It imports nothing of the manager.
package cpuset
