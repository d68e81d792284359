package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The freeze scenario's cluster slot, worker and jobs.

// owner returns the manager whose grain (kind, id) is while every manager
// of c is a member: protoactor's rendezvous hash over the actor addresses
// (a rejoin keeps the address, so it keeps the grains).
func (c *haCluster) owner(kind, id string) *haManager {
	rdv := pacluster.NewRendezvous()
	var members []*pacluster.Member
	for _, m := range c.ms {
		host, port := splitAddr(m.actor)
		members = append(members, &pacluster.Member{Id: m.name, Host: host, Port: port, Kinds: []string{kind}})
	}
	rdv.UpdateMembers(members)
	addr := rdv.GetByClusterIdentity(pacluster.NewClusterIdentity(id, kind))
	for _, m := range c.ms {
		if m.actor == addr {
			return m
		}
	}
	return nil
}

func splitAddr(addr string) (string, int32) {
	i := strings.LastIndexByte(addr, ':')
	var port int32
	fmt.Sscan(addr[i+1:], &port)
	return addr[:i], port
}

// ownedID returns the first id prefix-N whose job grain m hosts.
func (c *haCluster) ownedID(prefix string, m *haManager) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); c.owner("job", id) == m {
			return id
		}
	}
}

// start registers a slot whose node grain a follower hosts (so that the
// leader and the session holder can be frozen apart), starts the worker,
// and creates, per manager, a probe job and a running worker job whose
// grains that manager hosts.
func (s *freezeSetup) start(ctx context.Context, leader *haManager) error {
	c := s.c
	var token string
	for i := 0; s.node == ""; i++ {
		var slot *managerpb.RegisterClusterNodeResponse
		if err := retryUnavailable(ctx, func(ctx context.Context) (err error) {
			slot, err = leader.mgr.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: fmt.Sprintf("bench-freeze-%d", i)})
			return err
		}); err != nil {
			return fmt.Errorf("RegisterClusterNode: %w", err)
		}
		if c.owner("node", slot.GetNodeId().GetNodeId()) != leader {
			s.node, token = slot.GetNodeId().GetNodeId(), slot.GetToken()
		}
	}
	s.fc = newFreezeCheck(s.node)
	if err := s.startWorker(ctx, token); err != nil {
		return err
	}
	for _, m := range c.ms {
		p := &probeJob{id: c.ownedID("freeze-probe-"+m.name, m), owner: m.name, older: map[int64]int{}, op: "create"}
		var h *managerpb.JobHash
		if err := retryUnavailable(ctx, func(ctx context.Context) (err error) {
			h, err = leader.mgr.CreateJob(ctx, probeDefinition(p.id, 0, p.op))
			return err
		}); err != nil {
			return fmt.Errorf("CreateJob(%s): %w", p.id, err)
		}
		p.hash = h.GetHash()
		s.fc.probes = append(s.fc.probes, p)

		id := c.ownedID("freeze-run-"+m.name, m)
		r := &runJob{id: id, owner: m.name, pidFile: filepath.Join(c.dir, id+".pid")}
		if err := retryUnavailable(ctx, func(ctx context.Context) error {
			_, err := leader.mgr.CreateJob(ctx, runDefinition(r.id, r.pidFile))
			return err
		}); err != nil {
			return fmt.Errorf("CreateJob(%s): %w", r.id, err)
		}
		s.fc.runs[m.name] = r
	}
	s.fc.setPhase("setup", time.Now(), time.Time{})
	for _, m := range c.ms {
		r := s.fc.runs[m.name]
		if _, err := poll(ctx, recoverTimeout, 100*time.Millisecond, "StartJob("+r.id+")", func() (bool, error) {
			return s.fc.start(ctx, r, leader) == vOK, nil
		}); err != nil {
			return err
		}
	}
	if f := s.fc.falsesIn("setup"); len(f) > 0 {
		return fmt.Errorf("false answers while setting up: %v", f)
	}
	return nil
}

// startWorker starts norsk-ctl --mode=worker on the slot (every manager in
// --manager-url) and waits until ListNodes lists the node connected and
// STARTED.
func (s *freezeSetup) startWorker(ctx context.Context, token string) error {
	e, c := s.e, s.c
	port, err := listenPort()
	if err != nil {
		return err
	}
	bin, err := e.binaries(ctx)
	if err != nil {
		return err
	}
	stateDir := filepath.Join(c.dir, "worker")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	s.worker, err = startChild("norsk-ctl --mode=worker", filepath.Join(c.dir, "worker.log"), filepath.Join(bin, "norsk-ctl"),
		"--mode=worker", "--token="+token, "--manager-url="+c.urls(),
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--state-dir="+stateDir, "--log-level=info")
	if err != nil {
		return err
	}
	_, err = poll(ctx, recoverTimeout, 100*time.Millisecond, "the worker's node connected and STARTED", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := c.ms[0].mgr.ListNodes(cctx, &managerpb.ListNodesRequest{})
		if err != nil {
			return false, err
		}
		for _, n := range r.GetNodes() {
			if n.GetMetadata().GetNodeId().GetNodeId() == s.node {
				return n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w\nworker log:\n%s", err, s.worker.tail())
	}
	return nil
}

// otherPIDs returns the processes of the worker jobs not commanded in a
// trial with this victim.
func (s *freezeSetup) otherPIDs(victim *haManager) map[string]int {
	out := map[string]int{}
	for name, r := range s.fc.runs {
		if name != victim.name {
			out[r.pidFile] = readPID(r.pidFile)
		}
	}
	return out
}

// checkPIDs describes the jobs whose process changed or died ("" if none).
func (s *freezeSetup) checkPIDs(pids map[string]int) string {
	var bad []string
	for f, pid := range pids {
		if now := readPID(f); now != pid || !pidAlive(pid) {
			bad = append(bad, fmt.Sprintf("%s: pid %d, now %d (alive %t)", filepath.Base(f), pid, now, pidAlive(now)))
		}
	}
	return strings.Join(bad, "; ")
}

// cleanup stops the worker jobs (StopJob, then SIGKILL of a process still
// there) and the worker. Idempotent.
func (s *freezeSetup) cleanup() error {
	var errs []error
	if s.fc != nil {
		runs := s.fc.runs
		s.fc.runs = nil
		for _, r := range runs {
			pid := readPID(r.pidFile)
			for _, m := range s.c.running() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := m.mgr.StopJob(cctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: r.id}, Role: freezeRole,
					NodeId: &commonpb.NodeId{NodeId: s.node}})
				cancel()
				if err == nil {
					break
				}
			}
			if pid > 0 {
				_, _ = poll(context.Background(), 10*time.Second, 50*time.Millisecond, "", func() (bool, error) { return !pidAlive(pid), nil })
				if pidAlive(pid) && ourJobProcess(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					errs = append(errs, fmt.Errorf("%s's process %d did not stop after StopJob; killed", r.id, pid))
				}
			}
		}
	}
	if s.worker != nil {
		w := s.worker
		s.worker = nil
		if err := w.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
