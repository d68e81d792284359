package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The secure scenario (issue 12 §5): CreateJob throughput with mutual TLS
// and ACL tokens on, as a ratio to the same load with both off, measured in
// one run with the two variants' windows interleaved.

// Labels of the secure scenario's variants.
const (
	secOff = "off: plaintext, no ACL"
	secOn  = "on: mutual TLS + ACL"
)

// secureTarget is issue 12 §5's target: throughput on / off at 16 clients.
const secureTarget = 0.8

// secureMaterial is the bench's own CA and the certificates made from it
// (cluster/pki, as `norsk-manager tls` makes them): a server certificate
// per manager name, and the operator's client TLS configuration.
type secureMaterial struct {
	dir    string
	ca     *pki.CA
	caFile string
	// client is the operator's: a client certificate of the CA, and the CA
	// as the only root (the manager's certificate names 127.0.0.1, the host
	// the bench dials).
	client *tls.Config
	// control is what the bench's control connections to a cluster present:
	// a server certificate (server.norsk), which the managers' internal
	// Cluster service (Status) requires.
	control *tls.Config
	servers map[string]pki.Files
}

// newSecureMaterial makes a CA and the operator's and the bench's client
// configurations in dir (created).
func newSecureMaterial(dir string) (*secureMaterial, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.CreateCA(pki.CAOptions{})
	if err != nil {
		return nil, err
	}
	m := &secureMaterial{dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.pem"), servers: map[string]pki.Files{}}
	if err := pki.WriteNew([]pki.File{{Path: m.caFile, Data: ca.CertPEM, Mode: pki.CertFileMode}}); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	pair := func(role pki.Role) (tls.Certificate, error) {
		is, err := ca.Issue(pki.CertOptions{Role: role})
		if err != nil {
			return tls.Certificate{}, err
		}
		return tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	}
	cl, err := pair(pki.RoleClient)
	if err != nil {
		return nil, fmt.Errorf("issue the client certificate: %w", err)
	}
	ctl, err := pair(pki.RoleServer)
	if err != nil {
		return nil, fmt.Errorf("issue the control certificate: %w", err)
	}
	m.client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cl}, MinVersion: tls.VersionTLS12}
	m.control = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{ctl}, MinVersion: tls.VersionTLS12}
	return m, nil
}

// server returns the files of the server certificate of manager name,
// issuing it on first use.
func (m *secureMaterial) server(name string) (pki.Files, error) {
	if f, ok := m.servers[name]; ok {
		return f, nil
	}
	is, err := m.ca.Issue(pki.CertOptions{Role: pki.RoleServer})
	if err != nil {
		return pki.Files{}, fmt.Errorf("issue the server certificate of %s: %w", name, err)
	}
	f := pki.Files{Cert: filepath.Join(m.dir, name+".pem"), Key: filepath.Join(m.dir, name+"-key.pem"), CA: m.caFile}
	if err := pki.WriteNew(is.Files(f.Cert, f.Key)); err != nil {
		return pki.Files{}, err
	}
	m.servers[name] = f
	return f, nil
}

// managerFlags are the flags that turn mutual TLS and ACLs on for manager
// name (the same names in norsk-manager and the profiled bench process).
func (m *secureMaterial) managerFlags(name string) ([]string, error) {
	f, err := m.server(name)
	if err != nil {
		return nil, err
	}
	return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--acl"}, nil
}

// bearer sends an ACL token with every call, as the Go client and
// norsk-ctl do (per-RPC credentials: "authorization: Bearer <secret>").
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{acl.MetadataKey: "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// dialSecure opens one mutual TLS connection to addr that sends token (if
// not empty) with every call.
func dialSecure(addr string, cfg *tls.Config, token string) (*grpc.ClientConn, managerpb.ManagerClient, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg.Clone()))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, nil, err
	}
	conn.Connect()
	return conn, managerpb.NewManagerClient(conn), nil
}

// withToken is ctx carrying token as call metadata (for one call on a
// connection without per-RPC credentials).
func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, acl.MetadataKey, "Bearer "+token)
}

// bootstrapACL makes the first management token through api (retrying
// while the manager is not serving yet, up to timeout, and giving up if
// alive reports the process gone) and with it an operator token, whose
// secret it returns: the token the load sends (CreateJob needs operate).
func bootstrapACL(ctx context.Context, api managerpb.ManagerClient, timeout time.Duration, alive func() error) (string, error) {
	deadline := time.Now().Add(timeout)
	var mgmt *managerpb.AclToken
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		tok, err := api.AclBootstrap(cctx, &managerpb.AclBootstrapRequest{})
		cancel()
		if err == nil {
			mgmt = tok
			break
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded:
		default:
			return "", fmt.Errorf("acl bootstrap: %w", err)
		}
		if aerr := alive(); aerr != nil {
			return "", aerr
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("acl bootstrap: not within %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	cctx, cancel := context.WithTimeout(withToken(ctx, mgmt.GetSecretId()), 10*time.Second)
	defer cancel()
	op, err := api.AclTokenCreate(cctx, &managerpb.AclTokenCreateRequest{Name: "bench-operator", Role: "operator"})
	if err != nil {
		return "", fmt.Errorf("acl token create (operator): %w", err)
	}
	return op.GetSecretId(), nil
}

// startSecureManager starts a single manager with mutual TLS and --acl on
// dataDir, bootstraps its ACLs and returns it with an operator token.
func startSecureManager(ctx context.Context, e *env, mat *secureMaterial, dataDir, profile string) (*manager, string, error) {
	flags, err := mat.managerFlags("single")
	if err != nil {
		return nil, "", err
	}
	m, err := e.launchManager(ctx, dataDir, profile, flags, flags)
	if err != nil {
		return nil, "", err
	}
	conn, api, err := dialSecure(m.addr, mat.client, "")
	if err != nil {
		_ = m.stop()
		return nil, "", err
	}
	defer conn.Close()
	token, err := bootstrapACL(ctx, api, 30*time.Second, func() error {
		select {
		case <-m.done:
			return fmt.Errorf("%s exited before serving: %v\n%s", m.name, m.err, m.tail())
		default:
			return nil
		}
	})
	if err != nil {
		_ = m.stop()
		return nil, "", err
	}
	return m, token, nil
}

// runSecure measures CreateJob (closed loop, as createjob) at each client
// count on two single managers started side by side on fresh data dirs:
// one with no security flags, one with --tls-cert/--tls-key/--tls-ca
// (mutual TLS) and --acl, whose clients each present a client certificate
// and send an operator token with every call. The variants' windows
// alternate A B, B A, A B, … so that drift in the machine's load falls
// on both alike; the ratio on/off is taken per run pair. Then, unless
// --secure-cluster=false, the same for two 3-manager clusters
// (secure_cluster.go).
func runSecure(ctx context.Context, e *env) error {
	mat, err := newSecureMaterial(e.dir("secure-pki"))
	if err != nil {
		return fmt.Errorf("make certificates: %w", err)
	}
	res := map[string]map[int][]runStats{secOff: {}, secOn: {}}
	var notes []string
	for _, n := range e.clients {
		setups, err := startSecureSetups(ctx, e, mat, n)
		if err != nil {
			return err
		}
		interleave(ctx, e, setups, n, res)
		for _, s := range setups {
			if err := s.close(); err != nil {
				notes = append(notes, fmt.Sprintf("stopping the %s manager (%d clients): %v", s.label, n, err))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printSecure(e, "single manager", e.clients, res)
	for _, n := range notes {
		printNote(e, n)
	}
	if e.cpuProfile {
		printSecureProfiles(e)
	}
	if e.secureCluster {
		return runSecureCluster(ctx, e, mat)
	}
	return nil
}

// interleave runs e.runs windows of each setup at n clients, the order
// reversed every other run (A B, B A, …), into res[label][n].
func interleave(ctx context.Context, e *env, setups []*tpSetup, n int, res map[string]map[int][]runStats) {
	for r := range e.runs {
		order := slices.Clone(setups)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if ctx.Err() != nil {
				return
			}
			res[s.label][n] = append(res[s.label][n], s.run(ctx, e, r))
		}
	}
}

// secureProfile is the CPU profile path of a variant's manager at n
// clients (--manager-cpu-profile).
func (e *env) secureProfile(tag string, n int) string {
	if !e.cpuProfile {
		return ""
	}
	return filepath.Join(e.scratch, fmt.Sprintf("manager-cpu-%s-%d.pprof", tag, n))
}

// startSecureSetups starts the off and on managers for n clients and
// connects n clients to each; on error it stops what it started.
func startSecureSetups(ctx context.Context, e *env, mat *secureMaterial, n int) (setups []*tpSetup, err error) {
	defer func() {
		if err != nil {
			for _, s := range setups {
				_ = s.close()
			}
		}
	}()
	off, err := e.startManager(ctx, filepath.Join(e.dir(fmt.Sprintf("secure-off-%d", n)), "data"), e.secureProfile("off", n))
	if err != nil {
		return nil, err
	}
	a := &tpSetup{label: secOff, tag: "off", pids: func() []int { return []int{off.cmd.Process.Pid} }, stop: off.stop}
	setups = append(setups, a)
	if err := a.connectWith(n, []string{off.addr}, dial); err != nil {
		return setups, err
	}
	on, token, err := startSecureManager(ctx, e, mat, filepath.Join(e.dir(fmt.Sprintf("secure-on-%d", n)), "data"), e.secureProfile("on", n))
	if err != nil {
		return setups, err
	}
	b := &tpSetup{label: secOn, tag: "on", pids: func() []int { return []int{on.cmd.Process.Pid} }, stop: on.stop}
	setups = append(setups, b)
	err = b.connectWith(n, []string{on.addr}, func(addr string) (*grpc.ClientConn, managerpb.ManagerClient, error) {
		return dialSecure(addr, mat.client, token)
	})
	return setups, err
}

// pairRatios returns on[i].rate / off[i].rate for each run i both have.
func pairRatios(off, on []runStats) []float64 {
	var out []float64
	for i := range min(len(off), len(on)) {
		if off[i].rate > 0 {
			out = append(out, on[i].rate/off[i].rate)
		}
	}
	return out
}

// cpuPerOp is the median over runs of the server's CPU time per
// successful request, in µs.
func cpuPerOp(runs []runStats) float64 {
	var v []float64
	for _, r := range runs {
		if r.rate > 0 {
			v = append(v, r.serverCores/r.rate*1e6)
		}
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

func printSecure(e *env, what string, counts []int, res map[string]map[int][]runStats) {
	w := e.out
	fmt.Fprintf(w, "## secure: %s\n\n", what)
	fmt.Fprintf(w, "CreateJob (the createjob job), closed loop, one gRPC connection per client, %s warm-up + %s window, %d run(s) per variant and client count, "+
		"fresh data dirs per client count (its runs share them), fsync on. Variants: **off** (no TLS, no ACL) and **on** "+
		"(`--tls-cert/--tls-key/--tls-ca`: mutual TLS, each client presents a client certificate of the bench's CA; `--acl`: every call carries an operator token "+
		"as `authorization: Bearer` per-RPC credentials). Both run side by side; their windows alternate A B, B A, … CPU cores: the variant's manager process(es) + the bench. "+
		"Each cell: min / median / max over the runs.\n\n", e.warmup, e.window, e.runs)
	fmt.Fprintln(w, "| variant | clients | CreateJob/s | p50 ms | p99 ms | max ms | errors | CPU cores: managers + bench | CreateJob/s per run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range counts {
		for _, l := range []string{secOff, secOn} {
			fmt.Fprintf(w, "| %s %s\n", l, groupRow(fmt.Sprint(n), res[l][n], true))
		}
	}
	for _, n := range counts {
		for _, l := range []string{secOff, secOn} {
			for i, r := range res[l][n] {
				if r.firstErr != nil {
					fmt.Fprintf(w, "\n%s, %d clients, run %d: %d errors, first: %v\n", l, n, i+1, r.errs, r.firstErr)
				}
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratio on / off, per run pair (run i of on over run i of off: min / median / max), and the manager CPU per CreateJob (median over runs):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| clients | throughput on/off per pair | p50 on/off | p99 on/off | manager CPU µs per CreateJob: off → on |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	two := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	for _, n := range counts {
		off, on := res[secOff][n], res[secOn][n]
		r := pairRatios(off, on)
		if len(r) == 0 {
			continue
		}
		p50 := ms(medianRun(on, func(s runStats) time.Duration { return s.p50 })) / ms(medianRun(off, func(s runStats) time.Duration { return s.p50 }))
		p99 := ms(medianP99(on)) / ms(medianP99(off))
		fmt.Fprintf(w, "| %d | %s | %.2f | %.2f | %.0f → %.0f |\n", n, spread(r, two), p50, p99, cpuPerOp(off), cpuPerOp(on))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Target (issue 12 §5)")
	fmt.Fprintln(w)
	if r := pairRatios(res[secOff][16], res[secOn][16]); len(r) > 0 {
		m := median(r)
		fmt.Fprintf(w, "- 16 clients, %s: CreateJob on/off %.2f (median of %d run pairs; spread %s) ≥ %.1f: %s\n",
			what, m, len(r), spread(r, two), secureTarget, met(m >= secureTarget))
	} else {
		fmt.Fprintln(w, "- 16 clients were not measured (--clients): no verdict")
	}
	fmt.Fprintln(w)
}

// medianRun is the median of f over runs.
func medianRun(runs []runStats, f func(runStats) time.Duration) time.Duration {
	var v []time.Duration
	for _, r := range runs {
		v = append(v, f(r))
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// printSecureProfiles prints, per client count, the top of the on
// manager's CPU profile and the difference on − off (what the security
// adds, the off profile scaled to the on profile's total with -normalize).
func printSecureProfiles(e *env) {
	w := e.out
	fmt.Fprintln(w, "The managers ran as `go run ./test/bench __manager` (the same cluster/agent code and default config as norsk-manager, with the same TLS and ACL flags) "+
		"with a CPU profile over all runs of each client count.")
	fmt.Fprintln(w)
	for _, n := range e.clients {
		on, off := e.secureProfile("on", n), e.secureProfile("off", n)
		if _, err := os.Stat(on); errors.Is(err, os.ErrNotExist) {
			continue
		}
		printProfileTop(context.Background(), e, fmt.Sprintf("CPU profile of the on manager, %d clients", n), on, "-top")
		printProfileTop(context.Background(), e, fmt.Sprintf("CPU profile on − off (off normalised), %d clients, by cumulative time", n), on,
			"-top", "-cum", "-normalize", "-diff_base", off)
	}
}
