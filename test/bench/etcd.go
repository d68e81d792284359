package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
)

// The etcd side of createjob --peer-etcd: an etcd binary the operator
// built or installed, started as a single member on 127.0.0.1 with its
// defaults (fsync on), and a closed loop of KV.Put calls of 1 KiB values
// (about one CreateJob's job) on one gRPC connection per client.
//
// The Put client speaks etcd's v3 gRPC API (etcdserverpb.KV/Put, frozen
// since 3.0) with the request and response encoded here with protowire,
// rather than through etcd's Go modules: the bench would otherwise pull
// etcd's API module and its gogo/protobuf stack into this module for one
// call. The bytes on the wire are the same as clientv3's.

// etcdPutMethod is the full gRPC method name of etcd's KV.Put.
const etcdPutMethod = "/etcdserverpb.KV/Put"

// etcdValueSize is the Put value size: 1 KiB, against a CreateJob of a
// ~1 KB job (the comparison).
const etcdValueSize = 1024

// rawCodec passes *rawMsg bytes through unchanged; its name is "proto" so
// that the call's content-type is the one etcd expects.
type rawCodec struct{}

// rawMsg is an encoded protobuf message.
type rawMsg struct{ b []byte }

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	m.b = append(m.b[:0], data...)
	return nil
}

// encodePutRequest encodes etcdserverpb.PutRequest{key: 1, value: 2}.
func encodePutRequest(key, value []byte) []byte {
	b := make([]byte, 0, len(key)+len(value)+8)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

// putRevision returns the revision of a PutResponse (header: 1, its
// revision: 3), or an error when the bytes are not a PutResponse with a
// header: what a server other than etcd answering the method would give.
func putRevision(resp []byte) (int64, error) {
	header, err := field(resp, 1)
	if err != nil {
		return 0, fmt.Errorf("PutResponse: %w", err)
	}
	rev, err := field(header, 3)
	if err != nil {
		return 0, fmt.Errorf("PutResponse.header: %w", err)
	}
	v, n := protowire.ConsumeVarint(rev)
	if n < 0 {
		return 0, fmt.Errorf("PutResponse.header.revision: %w", protowire.ParseError(n))
	}
	return int64(v), nil
}

// field returns the payload of field num of message b: the bytes of a
// length-delimited field, the encoded varint of a varint field.
func field(b []byte, num protowire.Number) ([]byte, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
		var val []byte
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			val, l = v, m
		case protowire.VarintType:
			_, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			val, l = b[:m], m
		default:
			m := protowire.ConsumeFieldValue(n, typ, b)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			l = m
		}
		if n == num {
			return val, nil
		}
		b = b[l:]
	}
	return nil, fmt.Errorf("no field %d", num)
}

// etcdPut sends one Put of key=value on conn and checks the answer.
func etcdPut(ctx context.Context, conn *grpc.ClientConn, key, value []byte) error {
	var resp rawMsg
	if err := conn.Invoke(ctx, etcdPutMethod, &rawMsg{b: encodePutRequest(key, value)}, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	_, err := putRevision(resp.b)
	return err
}

// etcdVersion runs bin --version and returns its first line; an error
// says clearly that bin is not an etcd server binary.
func etcdVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || !strings.HasPrefix(first, "etcd Version: ") {
		return "", fmt.Errorf("--peer-etcd %s: not an etcd server binary (%q --version printed %q, error %v; want a line \"etcd Version: 3.x\")", bin, bin, first, err)
	}
	return strings.TrimPrefix(first, "etcd Version: "), nil
}

// etcdServer is a single-member etcd started by the bench.
type etcdServer struct {
	*child
	addr string // client address, host:port
}

// startEtcd starts bin as a single member whose data dir is dataDir and
// whose client and peer ports are on 127.0.0.1, and waits until a Put
// succeeds (30 s at most). noSync adds --unsafe-no-fsync (createjob's
// diagnostic, as for the manager).
func startEtcd(ctx context.Context, bin, dataDir string, noSync bool) (*etcdServer, error) {
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cport), fmt.Sprintf("http://127.0.0.1:%d", pport)
	args := []string{"--name", "bench", "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench=" + peer, "--initial-cluster-state", "new", "--log-level", "warn"}
	if noSync {
		args = append(args, "--unsafe-no-fsync")
	}
	c, err := startChild("etcd", filepath.Clean(dataDir)+".log", bin, args...)
	if err != nil {
		return nil, err
	}
	s := &etcdServer{child: c, addr: fmt.Sprintf("127.0.0.1:%d", cport)}
	if err := s.waitReady(ctx); err != nil {
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

func (s *etcdServer) waitReady(ctx context.Context) error {
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := etcdPut(cctx, conn, []byte("bench-ready"), []byte("1"))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("etcd exited before serving: %v\n%s", s.err, s.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not accept a Put on %s within 30 s: %w\n%s", s.addr, err, s.tail())
		}
	}
}

// etcdLoad is n Put clients, each on its own connection, on an etcd with
// a fresh data dir.
type etcdLoad struct {
	e     *env
	srv   *etcdServer
	conns []*grpc.ClientConn
	val   []byte
	seq   []int
}

func newEtcdLoad(ctx context.Context, e *env, n int) (*etcdLoad, error) {
	srv, err := startEtcd(ctx, e.peerEtcd, filepath.Join(e.dir(fmt.Sprintf("etcd-%d", n)), "data"), e.noSync)
	if err != nil {
		return nil, err
	}
	l := &etcdLoad{e: e, srv: srv, conns: make([]*grpc.ClientConn, n), val: bytes.Repeat([]byte("v"), etcdValueSize), seq: make([]int, n)}
	for c := range n {
		conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			l.close()
			return nil, err
		}
		conn.Connect()
		l.conns[c] = conn
	}
	return l, nil
}

// run is one warm-up + window of Puts of new keys (no overwrites, as the
// peer baselines did); keys are unique across runs.
func (l *etcdLoad) run(ctx context.Context, r int) runStats {
	cpu := windowCPU(l.srv.cmd.Process.Pid, l.e.warmup, l.e.window)
	st := closedLoop(ctx, len(l.conns), l.e.warmup, l.e.window, func(ctx context.Context, c int) error {
		l.seq[c]++
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return etcdPut(cctx, l.conns[c], fmt.Appendf(nil, "/bench/r%d/c%02d/%07d", r, c, l.seq[c]), l.val)
	})
	st.serverCores, st.benchCores = cpu()
	return st
}

// close closes the connections and stops etcd (idempotent).
func (l *etcdLoad) close() error {
	for _, c := range l.conns {
		if c != nil {
			c.Close()
		}
	}
	l.conns = nil
	if l.srv == nil {
		return nil
	}
	err := l.srv.stop()
	l.srv = nil
	return err
}

// printEtcd prints CreateJob next to etcd's Put at each client count:
// medians over the runs of the rate and of the server's CPU per write.
func printEtcd(e *env, version string, size appendSize, mgr, etcd map[int][]runStats) {
	w := e.out
	fmt.Fprintf(w, "### Side by side: etcd %s (single member, %s) Put of %d-byte values vs CreateJob of a %d-byte job\n\n",
		version, map[bool]string{false: "fsync on", true: "--unsafe-no-fsync"}[e.noSync], etcdValueSize, size.job)
	fmt.Fprintf(w, "Same clients (one gRPC connection each, closed loop), same %s warm-up + %s window, %d run(s), windows alternating "+
		"with CreateJob's on the same box (etcd first in odd runs); every Put writes a new key. CPU per write: the server process's "+
		"user+system CPU (/proc/<pid>/stat) over the window divided by the writes acknowledged in it. Cells: medians over the runs.\n\n",
		e.warmup, e.window, e.runs)
	fmt.Fprintln(w, "| clients | etcd Put/s | CreateJob/s | ratio CreateJob / etcd | CPU per write ms, etcd / ours | CPU ratio ours / etcd | etcd p99 ms | etcd errors | etcd Put/s per run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range e.clients {
		ours, theirs := mgr[n], etcd[n]
		if len(ours) == 0 || len(theirs) == 0 {
			continue
		}
		a, b := medianRate(ours), medianRate(theirs)
		ca, cb := medianCPUPerWrite(ours), medianCPUPerWrite(theirs)
		var perRun []string
		errs := 0
		for _, r := range theirs {
			perRun = append(perRun, fmtRate(r.rate))
			errs += r.errs
		}
		fmt.Fprintf(w, "| %d | %s | %s | %.2f | %.2f / %.2f | %.1f× | %s | %d | %s |\n", n, fmtRate(b), fmtRate(a), a/b,
			cb, ca, ca/cb, fmtMs(ms(medianP99(theirs))), errs, strings.Join(perRun, ", "))
	}
	for _, n := range e.clients {
		for i, r := range etcd[n] {
			if r.firstErr != nil {
				fmt.Fprintf(w, "\n%d clients, etcd run %d: %d errors, first: %v\n", n, i+1, r.errs, r.firstErr)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Goal (issue 22 §2): CreateJob ≥ 1.0× etcd's Put rate and ≤ 1.5× its CPU per write on one process at 16 and 64 clients.")
	fmt.Fprintln(w)
}

// medianCPUPerWrite returns the median over runs of the server's CPU per
// acknowledged write, in ms (0 for a run without writes).
func medianCPUPerWrite(runs []runStats) float64 {
	var vs []float64
	for _, r := range runs {
		v := 0.0
		if r.rate > 0 {
			v = r.serverCores / r.rate * 1000
		}
		vs = append(vs, v)
	}
	return median(vs)
}
