package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// tokenRef is per-RPC credentials whose token is set later (none until
// then): the control connections of a cluster exist before its ACLs are
// bootstrapped.
type tokenRef struct{ p atomic.Pointer[string] }

func (t *tokenRef) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if s := t.p.Load(); s != nil {
		return map[string]string{acl.MetadataKey: "Bearer " + *s}, nil
	}
	return nil, nil
}

func (*tokenRef) RequireTransportSecurity() bool { return true }

// runSecureCluster is the secure scenario on two 3-manager clusters
// (--bootstrap-expect 3, client c on manager c mod 3, so two thirds of
// the writes are forwarded to the leader over the managers' internal
// service): off, plaintext everywhere; on, every manager with its own
// server certificate, mutual TLS on the API, Raft and actor ports and on
// the forwarded calls, and --acl. At each count of --secure-cluster-clients.
func runSecureCluster(ctx context.Context, e *env, mat *secureMaterial) error {
	res := map[string]map[int][]runStats{secOff: {}, secOn: {}}
	var notes []string
	for _, n := range e.secureClusterClients {
		setups, err := startSecureClusters(ctx, e, mat, n)
		if err != nil {
			return err
		}
		interleave(ctx, e, setups, n, res)
		for _, s := range setups {
			if err := s.close(); err != nil {
				notes = append(notes, fmt.Sprintf("stopping the %s cluster (%d clients): %v", s.label, n, err))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printSecure(e, "3-manager cluster", e.secureClusterClients, res)
	fmt.Fprintf(e.out, "Cluster managers with %s and `--log-level warn`; not profiled (--manager-cpu-profile profiles the single managers).\n\n", timingsLine(e.timings))
	for _, n := range notes {
		printNote(e, n)
	}
	return nil
}

// startSecureClusters starts the off and on clusters for n clients, waits
// until each is stable (the on one after its ACL bootstrap) and connects n
// clients to each; on error it stops what it started.
func startSecureClusters(ctx context.Context, e *env, mat *secureMaterial, n int) (setups []*tpSetup, err error) {
	defer func() {
		if err != nil {
			for _, s := range setups {
				_ = s.close()
			}
		}
	}()
	pidsOf := func(c *haCluster) func() []int {
		return func() []int {
			var pids []int
			for _, m := range c.running() {
				pids = append(pids, m.pid())
			}
			return pids
		}
	}
	addrsOf := func(c *haCluster) []string {
		var a []string
		for _, m := range c.ms {
			a = append(a, m.api)
		}
		return a
	}
	off, err := e.newCluster(fmt.Sprintf("secure-off-3m-%d", n), 3, "warn")
	if err != nil {
		return nil, err
	}
	a := &tpSetup{label: secOff, tag: "off3", pids: pidsOf(off), stop: off.close}
	setups = append(setups, a)
	if err := off.startAll(); err != nil {
		return setups, err
	}
	if _, err := off.waitStable(ctx, recoverTimeout); err != nil {
		return setups, err
	}
	if err := a.connectWith(n, addrsOf(off), dial); err != nil {
		return setups, err
	}

	control := &tokenRef{}
	on, err := e.newClusterOpts(fmt.Sprintf("secure-on-3m-%d", n), 3, "warn", clusterOpts{
		flags: func(m *haManager) ([]string, error) { return mat.managerFlags(m.name) },
		control: func(addr string) (*grpc.ClientConn, error) {
			return dialFastWith(addr, grpc.WithTransportCredentials(credentials.NewTLS(mat.control.Clone())), grpc.WithPerRPCCredentials(control))
		},
	})
	if err != nil {
		return setups, err
	}
	b := &tpSetup{label: secOn, tag: "on3", pids: pidsOf(on), stop: on.close}
	setups = append(setups, b)
	if err := on.startAll(); err != nil {
		return setups, err
	}
	if _, err := waitServing(ctx, on.ms, recoverTimeout); err != nil {
		return setups, err
	}
	token, err := bootstrapACL(ctx, on.ms[0].mgr, recoverTimeout, func() error { return exitedErr(on.ms) })
	if err != nil {
		return setups, err
	}
	control.p.Store(&token)
	if _, err := on.waitStable(ctx, recoverTimeout); err != nil {
		return setups, err
	}
	err = b.connectWith(n, addrsOf(on), func(addr string) (*grpc.ClientConn, managerpb.ManagerClient, error) {
		return dialSecure(addr, mat.client, token)
	})
	return setups, err
}
