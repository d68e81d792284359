package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// serveCommand is the hidden first argument that makes the bench binary a
// manager with a CPU profile (createjob --manager-cpu-profile): the same
// cluster/agent code and config norsk-manager runs (its main is a thin
// wrapper), profiled from Start until SIGTERM.
const serveCommand = "__manager"

func runServe(args []string) error {
	fs := flag.NewFlagSet(serveCommand, flag.ContinueOnError)
	dir := fs.String("data-dir", "", "data dir")
	addr := fs.String("api-addr", "127.0.0.1:0", "API address")
	profile := fs.String("cpu-profile", "", "write a CPU profile here")
	noSync := fs.Bool("no-sync", false, "do not fsync (as norsk-manager --unsafe-no-fsync)")
	tlsCert := fs.String("tls-cert", "", "as norsk-manager --tls-cert")
	tlsKey := fs.String("tls-key", "", "as norsk-manager --tls-key")
	tlsCA := fs.String("tls-ca", "", "as norsk-manager --tls-ca")
	aclOn := fs.Bool("acl", false, "as norsk-manager --acl")
	noEngine := fs.Bool("no-placement-engine", false, "run no placement engine (agent.Config.NoPlacementEngine)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := agent.DefaultConfig(*dir)
	cfg.APIAddr = *addr
	cfg.Store.SyncWrites = !*noSync
	cfg.ACL = *aclOn
	cfg.NoPlacementEngine = *noEngine
	if *tlsCert != "" {
		// As norsk-manager's tlsOptions.config, with the default names.
		certs, err := pki.NewReloader(pki.ReloaderConfig{Files: pki.Files{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA}, Name: "api"})
		if err != nil {
			return err
		}
		cfg.TLS = agent.TLSConfig{Certs: certs, WorkerName: pki.RoleName(pki.RoleWorker, pki.DefaultDomain),
			PeerName: pki.RoleName(pki.RoleServer, pki.DefaultDomain)}
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	defer a.Shutdown()
	if err := a.Start(); err != nil {
		return err
	}
	f, err := os.Create(*profile)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	<-ctx.Done()
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", *profile, err)
	}
	return nil
}
