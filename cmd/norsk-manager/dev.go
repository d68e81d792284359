package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/process"
)

// devRole is the role --run-job starts its job under.
const devRole = "primary"

// runDev runs the local worker of --dev on a fresh cluster slot until ctx
// ends, and with --run-job creates and starts that job and prints the event
// stream. On the way out it stops the jobs the local worker runs: --dev is
// throw-away, unlike a real worker, whose jobs outlive it.
func runDev(ctx context.Context, log *slog.Logger, a *agent.Agent, job *managerpb.Job, dt *devTLS) error {
	settings := client.Settings{URL: a.APIAddr()}
	if dt != nil {
		settings.TLS = dt.clientTLS
	}
	mgr, err := client.Connect(ctx, settings)
	if err != nil {
		return err
	}
	defer mgr.Close()
	nodeID, token, err := mgr.RegisterClusterNode(ctx, "dev-worker", map[string]string{"dev": "true"})
	if err != nil {
		return fmt.Errorf("register the dev worker's slot: %w", err)
	}
	stateDir, err := os.MkdirTemp("", "norsk-dev-worker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)

	rcfg := process.DevConfig()
	rcfg.StateDir = filepath.Join(stateDir, "process")
	rcfg.Environ = devEnviron()
	rcfg.Logger = log.With("component", "dev-worker")
	rt, err := process.New(rcfg)
	if err != nil {
		return err
	}
	wcfg := worker.DevConfig()
	wcfg.HealthInterval = 2 * time.Second
	wcfg.ManagerURLs = []string{a.APIAddr()}
	wcfg.Token = token
	wcfg.Version = buildinfo.String()
	wcfg.StateDir = stateDir
	wcfg.Runtime = rt
	wcfg.Logger = log.With("component", "dev-worker")
	if dt != nil {
		wcfg.ServerTLS, wcfg.ManagerTLS = dt.workerServer, dt.workerRegister
	}
	w, err := worker.New(wcfg)
	if err != nil {
		return err
	}
	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(wctx); err != nil {
			log.Error("dev worker stopped", "error", err)
		}
	}()
	defer func() {
		stopJobs(log, rt)
		stopWorker()
		wg.Wait()
		rt.Shutdown()
	}()
	if err := waitOnline(ctx, mgr, client.NodeID(nodeID)); err != nil {
		return err
	}
	fmt.Printf("dev manager serving on %s; local worker is node %s\n", a.APIAddr(), nodeID)
	fmt.Printf("try: norsk-ctl --manager-url %s%s node list\n", a.APIAddr(), dt.ctlFlags())
	if job == nil {
		<-ctx.Done()
		return nil
	}
	jobID, err := createAndStart(ctx, mgr, job, string(nodeID))
	if err != nil {
		return err
	}
	fmt.Printf("job %s started on node %s as %q; events follow (Ctrl-C to stop)\n", jobID, nodeID, devRole)
	err = mgr.EventStream(ctx, client.EventStreamSettings{PendingWindow: time.Hour, OnEvent: func(ev *managerpb.EventStreamEvent) error {
		fmt.Println(format.EventLine(ev))
		return nil
	}})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// devEnviron is the environment of the dev worker's services: this
// process's, with the directory of this executable first on PATH so that a
// norsk-ctl built next to norsk-manager (go build -o bin/ ./cmd/...) is found.
func devEnviron() []string {
	env := os.Environ()
	exe, err := os.Executable()
	if err != nil {
		return env
	}
	dir := filepath.Dir(exe)
	for i, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + dir + string(os.PathListSeparator) + p
			return env
		}
	}
	return append(env, "PATH="+dir)
}

func waitOnline(ctx context.Context, mgr *client.NorskManager, id client.NodeID) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		nodes, err := mgr.ListNodes(ctx)
		if err == nil {
			for _, n := range nodes {
				if n.GetMetadata().GetNodeId().GetNodeId() == string(id) && n.GetConnected() {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the dev worker did not come online: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readJobFile reads a protojson norsk.api.manager.Job for --run-job.
func readJobFile(path string) (*managerpb.Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--run-job: %w", err)
	}
	job := &managerpb.Job{}
	if err := protojson.Unmarshal(b, job); err != nil {
		return nil, fmt.Errorf("--run-job %s: not a norsk.api.manager.Job in protojson: %w", path, err)
	}
	if job.GetJobId().GetJobId() == "" {
		return nil, fmt.Errorf("--run-job %s: the job needs a jobId to be started", path)
	}
	return job, nil
}

// createAndStart creates job (unless it exists) and starts it on nodeID.
func createAndStart(ctx context.Context, mgr *client.NorskManager, job *managerpb.Job, nodeID string) (string, error) {
	id := job.GetJobId().GetJobId()
	if _, err := mgr.CreateJob(ctx, job); err != nil && status.Code(err) != codes.AlreadyExists {
		return "", fmt.Errorf("create job %s: %w", id, err)
	}
	if err := mgr.StartJob(ctx, client.JobID(id), devRole, client.NodeID(nodeID)); err != nil {
		return "", fmt.Errorf("start job %s: %w", id, err)
	}
	return id, nil
}

// stopJobs stops every job of the dev worker's runtime.
func stopJobs(log *slog.Logger, rt *process.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, j := range rt.List() {
		if err := rt.Stop(ctx, j.Key(), 5*time.Second); err != nil {
			log.Warn("stop dev job", "job", j.Key().String(), "error", err)
		}
	}
}
