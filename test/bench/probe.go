package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// runProbe is one recovery measurement, run in its own process so that the
// heap holds nothing but this manager: agent.New + Start on --dir, the first
// JobById (--job-id) and JobSearch (tag customer eq --customer) answers,
// then the heap after two GCs. It prints a probeResult as JSON.
func runProbe(args []string) error {
	fs := flag.NewFlagSet(probeCommand, flag.ContinueOnError)
	dir := fs.String("dir", "", "data dir")
	jobID := fs.String("job-id", "", "job to read (empty: an empty data dir; NotFound is the answer)")
	customer := fs.String("customer", "cust-0000", "customer tag value to search for")
	profile := fs.String("heap-profile", "", "write a heap profile here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	runtime.GC()
	t0 := time.Now()
	cfg := agent.DefaultConfig(*dir)
	cfg.APIAddr = "127.0.0.1:0"
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	defer a.Shutdown()
	var r probeResult
	r.NewMs = msSince(t0)
	if err := a.Start(); err != nil {
		return err
	}
	r.StartMs = msSince(t0)
	conn, api, err := dial(a.APIAddr())
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := firstJobByID(ctx, api, *jobID); err != nil {
		return err
	}
	r.JobByIDMs = msSince(t0)
	if r.Hits, err = firstSearch(ctx, api, *customer); err != nil {
		return err
	}
	r.SearchMs = msSince(t0)
	runtime.GC()
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	r.HeapAlloc, r.HeapInuse, r.RSS = mem.HeapAlloc, mem.HeapInuse, rss()
	if *profile != "" {
		if err := writeHeapProfile(*profile); err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func msSince(t time.Time) float64 { return ms(time.Since(t)) }

// firstJobByID calls JobById until it answers (NotFound counts as the
// answer when id is empty, i.e. on an empty data dir).
func firstJobByID(ctx context.Context, api managerpb.ManagerClient, id string) error {
	want := id
	if id == "" {
		id = "no-such-job"
	}
	return untilAnswered(ctx, "JobById", func(ctx context.Context) error {
		_, err := api.JobById(ctx, &commonpb.JobId{JobId: id})
		if want == "" && status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	})
}

// firstSearch runs JobSearch (tag customer eq value) until it answers and
// returns the number of jobs found.
func firstSearch(ctx context.Context, api managerpb.ManagerClient, value string) (int, error) {
	var hits int
	err := untilAnswered(ctx, "JobSearch", func(ctx context.Context) error {
		hits = 0
		stream, err := api.JobSearch(ctx, &managerpb.JobSearchRequest{JobFilter: []*managerpb.JobFilter{{JobFilter: &managerpb.JobFilter_TagFilter{
			TagFilter: &managerpb.TagFilter{TagName: "customer", Comparison: &managerpb.TagFilter_Eq{Eq: value}}}}}})
		if err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			hits++
		}
	})
	return hits, err
}

// untilAnswered retries call (every 10 ms, 60 s at most) until it succeeds.
func untilAnswered(ctx context.Context, what string, call func(context.Context) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := call(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 60 s: %w", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rss returns this process's resident set size in bytes.
func rss() uint64 {
	f := strings.Fields(procField("/proc/self/status", "VmRSS"))
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseUint(f[0], 10, 64)
	return kb << 10
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
