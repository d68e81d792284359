package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// machineLine describes the box: CPU model, cores, RAM, kernel, Go and the
// cost of one O_DSYNC 4 KiB write in dir (the disk the data dirs are on).
func machineLine(dir string) string {
	var fsync string
	if d, n, err := dsyncWrite(dir, 1000); err == nil {
		fsync = fmt.Sprintf("one O_DSYNC 4 KiB write %.3f ms (mean of %d sequential writes in %s)", ms(d), n, dir)
	} else {
		fsync = "fsync: " + err.Error()
	}
	return fmt.Sprintf("%s, %d cores, %s RAM, Linux %s, %s; %s", cpuModel(), runtime.NumCPU(), memTotal(),
		strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")), runtime.Version(), fsync)
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "?"
	}
	return string(b)
}

// procField returns the value of the first "key : value" line of a /proc
// file whose key is key.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func cpuModel() string { return procField("/proc/cpuinfo", "model name") }

func memTotal() string {
	f := strings.Fields(procField("/proc/meminfo", "MemTotal"))
	if len(f) == 0 {
		return "?"
	}
	kb, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// dsyncWrite appends n 4 KiB blocks to a new file opened with O_DSYNC (as
// dd bs=4k count=n oflag=dsync does) and returns the mean time per write.
func dsyncWrite(dir string, n int) (time.Duration, int, error) {
	p := filepath.Join(dir, fmt.Sprintf("norsk-bench-dsync-%d", os.Getpid()))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_DSYNC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(p)
	defer f.Close()
	buf := make([]byte, 4096)
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			return 0, 0, err
		}
	}
	return time.Since(start) / time.Duration(n), n, nil
}

// loadLine reports how busy the shared box was: the load averages and the
// share of the last 60 s in which some task waited for a CPU or for I/O
// (/proc/pressure).
func loadLine() string {
	la := strings.Fields(readFile("/proc/loadavg"))
	if len(la) > 3 {
		la = la[:3]
	}
	return fmt.Sprintf("load average %s; pressure (some, avg60): CPU %s%%, I/O %s%%", strings.Join(la, " "),
		pressure("/proc/pressure/cpu"), pressure("/proc/pressure/io"))
}

// pressure returns the avg60 of the "some" line of a PSI file.
func pressure(path string) string {
	for _, line := range strings.Split(readFile(path), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "avg60="); ok {
				return v
			}
		}
	}
	return "?"
}
