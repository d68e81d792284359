package worker

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/mem"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// loadSampler measures the host's load for hello and health messages. CPU
// busy is the delta of /proc/stat totals between two samples (the first
// sample measures since boot), so it keeps the previous sample; it does not
// use gopsutil's package-level cpu.Percent state.
type loadSampler struct {
	dir   string // state directory: its filesystem's usage is reported
	ncpu  int
	mu    sync.Mutex
	prevB float64 // busy seconds at the last sample; guarded by mu
	prevT float64 // total seconds at the last sample; guarded by mu
}

func newLoadSampler(stateDir string) *loadSampler {
	return &loadSampler{dir: stateDir, ncpu: runtime.NumCPU()}
}

// Sample returns the measured load: VCpus = CPUs busy since the previous
// sample (0..cpu count), Memory = MiB in use (total − available),
// DiskSpace = GiB used on the state directory's filesystem. A metric that
// cannot be read is reported as 0; the error of the first such metric is
// returned alongside for logging.
func (s *loadSampler) Sample(ctx context.Context) (*workerpb.Capacity, error) {
	c := &workerpb.Capacity{}
	var firstErr error
	keep := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	if busy, err := s.cpuBusy(ctx); err != nil {
		keep(err)
	} else {
		c.VCpus = float32(busy)
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		keep(fmt.Errorf("read memory usage: %w", err))
	} else {
		c.Memory = float32(float64(vm.Total-vm.Available) / mib)
	}
	if du, err := disk.UsageWithContext(ctx, s.dir); err != nil {
		keep(fmt.Errorf("read disk usage of %s: %w", s.dir, err))
	} else {
		c.DiskSpace = float32(float64(du.Used) / gib)
	}
	return c, firstErr
}

func (s *loadSampler) cpuBusy(ctx context.Context) (float64, error) {
	ts, err := cpu.TimesWithContext(ctx, false)
	if err != nil || len(ts) == 0 {
		return 0, fmt.Errorf("read cpu times: %w", err)
	}
	t := ts[0]
	// Guest time is already part of User/Nice on Linux.
	busy := t.User + t.Nice + t.System + t.Irq + t.Softirq + t.Steal
	total := busy + t.Idle + t.Iowait
	s.mu.Lock()
	defer s.mu.Unlock()
	dB, dT := busy-s.prevB, total-s.prevT
	s.prevB, s.prevT = busy, total
	if dT <= 0 {
		return 0, nil
	}
	v := dB / dT * float64(s.ncpu)
	return min(max(v, 0), float64(s.ncpu)), nil
}

// hardwareInfo describes this host for ClusterMemberRegister. Fields that
// cannot be read are left empty.
func hardwareInfo(ctx context.Context) *managerpb.ClusterHardware {
	hw := &managerpb.ClusterHardware{
		CpuCount: uint32(runtime.NumCPU()),
		Os:       runtime.GOOS,
	}
	switch runtime.GOARCH {
	case "arm64":
		hw.Architecture = commonpb.Architecture_AARCH_64
	default:
		hw.Architecture = commonpb.Architecture_X86_64
	}
	if name, err := os.Hostname(); err == nil {
		hw.Hostname = name
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		hw.MemoryBytes = vm.Total
	}
	if hi, err := host.InfoWithContext(ctx); err == nil {
		hw.Kernel = hi.KernelVersion
		if hi.Platform != "" {
			hw.Os = strings.TrimSpace(fmt.Sprintf("%s (%s %s)", runtime.GOOS, hi.Platform, hi.PlatformVersion))
		}
	}
	return hw
}
