//go:build linux

package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/cpuset"
)

// TestRuntime_CPUList: a job with norsk_cpu_list runs its services on
// exactly those CPUs — what the kernel says in the service's own
// /proc/self/status, first start and restart alike — and they get the
// list as NORSK_CPU_LIST.
func TestRuntime_CPUList(t *testing.T) {
	allowed, err := cpuset.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	// A strict subset of what the worker may use, so that an unpinned
	// service would print something else: one CPU, or two apart.
	cpus := []uint32{allowed[len(allowed)-1]}
	if len(allowed) > 2 {
		cpus = append(cpus, allowed[0]) // any order; ascending in the env
	}
	if len(allowed) == 1 {
		t.Log("one cpu allowed: pinned and unpinned look the same here")
	}
	sorted := slices.Sorted(slices.Values(cpus))
	want := noderesources.FormatCPURanges(sorted) // the kernel's list format
	r, c := newTestRuntime(t, t.TempDir(), nil)
	pinned := svc("enc", `grep Cpus_allowed_list /proc/self/status; echo "env=$NORSK_CPU_LIST"; if [ -f ran ]; then exec sleep 30; fi; touch ran; exit 1`)
	pinned.Restart, pinned.RestartCount = commonpb.Service_ON_FAILURE, 1
	job := testJob("job-pinned", pinned)
	job.NorskCpuList = cpus
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	lines := c.WaitN(t, 2, "two affinity lines (start and restart)", isOutput(key, "enc", "stdout: Cpus_allowed_list:"))
	for _, l := range lines {
		if got, exp := l.Info.GetContainerEvent().GetText(), "stdout: Cpus_allowed_list:\t"+want; got != exp {
			t.Errorf("service affinity %q; want %q", got, exp)
		}
	}
	c.Wait(t, "NORSK_CPU_LIST", isOutput(key, "enc", "stdout: env="+noderesources.FormatCPUList(sorted)))

	// A job without a list is not pinned and gets no NORSK_CPU_LIST.
	free := testJob("job-free", svc("app", `grep Cpus_allowed_list /proc/self/status; echo "env=[$NORSK_CPU_LIST]"; exec sleep 30`))
	fkey := worker.KeyOf(free)
	if _, err := r.Start(context.Background(), free); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "unpinned affinity", isOutput(fkey, "app", "stdout: Cpus_allowed_list:\t"+noderesources.FormatCPURanges(allowed)))
	c.Wait(t, "no NORSK_CPU_LIST", isOutput(fkey, "app", "stdout: env=[]"))
}

// TestRuntime_CPUListRefused: a cpu this worker may not run on is refused
// at Start (ErrInvalidJob naming it), and nothing runs.
func TestRuntime_CPUListRefused(t *testing.T) {
	allowed, err := cpuset.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	bad := allowed[len(allowed)-1] + 1
	r, _ := newTestRuntime(t, t.TempDir(), nil)
	job := testJob("job-bad-cpus", svc("app", "exec sleep 30"))
	job.NorskCpuList = []uint32{allowed[0], bad}
	_, err = r.Start(context.Background(), job)
	if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), fmt.Sprintf("norsk_cpu_list names cpu %d", bad)) {
		t.Fatalf("Start = %v; want ErrInvalidJob naming norsk_cpu_list and cpu %d", err, bad)
	}
	if got := r.List(); len(got) != 0 {
		t.Fatalf("List = %v; want nothing running", got)
	}
}
