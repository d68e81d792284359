package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// Config configures an Agent. Start from DefaultConfig (production) or
// DevConfig (loopback, short timeouts: tests and --dev) and set the
// fields below; New calls Validate.
type Config struct {
	// Listen is the host:port the worker's gRPC server (the
	// NodeControllerStream the manager dials back) listens on. Port 0 picks
	// a free port; Agent.Addr reports it.
	Listen string

	// Advertise is the host (or host:port) registered with the manager for
	// dial-back. Empty means Listen's host and the port actually bound. It
	// must be set when Listen's host is unspecified (0.0.0.0, ::) and a
	// Token is set.
	Advertise string

	// ManagerURLs are the managers' gRPC addresses ("host:port"; a
	// "grpc://" or "http://" prefix is accepted) tried in order for
	// registration, failing over to the next on error. Required with a
	// Token. Set without a Token, the worker restarts as the node whose
	// identity StateDir holds and registers with its credential alone (Run
	// fails with ErrNoStoredIdentity if there is none). Empty (and no
	// Token): a mock-pool worker, whose StateDir must hold no identity
	// (Run fails with ErrIdentityWithoutManager).
	ManagerURLs []string

	// Token is the cluster-slot registration token minted by
	// RegisterClusterNode. A worker restarting over a StateDir that holds
	// the identity obtained with it does not need it (see ManagerURLs);
	// one given that differs from the token of the stored identity makes
	// the worker register as a new node. Empty with no ManagerURLs makes
	// this a mock-pool worker: it registers nowhere, accepts sessions from
	// any manager, adopts the node id the manager dials it with, and sends
	// hello without a proof.
	Token string

	// StateDir holds the node identity (identity.json, mode 0600) and the
	// runtime's state. Required. Created (mode 0700) if missing, made
	// private at every start (SecureStateDir: 0700, secrets 0600, owned by
	// the worker's user). Run locks it (LockStateDir) for as long as it
	// runs: one agent per directory.
	StateDir string

	// HealthInterval is the period of health messages on a verified
	// session. Default 2s.
	HealthInterval time.Duration

	// StopGrace is how long a service gets between SIGTERM (or the
	// runtime's polite stop) and a forced kill when the manager stops a
	// job. Default 10s; 0 kills at once.
	StopGrace time.Duration

	// Tags are reported in hello's node_metadata.tags. Optional.
	Tags map[string]string

	// Resources is what the worker offers for placement (capacity in
	// reference units, GPU capacity and model, capabilities, zone, the
	// core ids for pinned jobs, architecture, shape, subnet), sent in
	// ClusterMemberRegister and in every hello; the manager keeps the last
	// one it received (docs/design/nodes-capacity.md). DefaultConfig
	// offers every CPU of the process's affinity mask as cores, half of
	// them as capacity (noderesources.DefaultCapacity), and the binary's
	// architecture.
	// Nil sends none, as a worker that predates it: the manager then
	// counts the node's capacity as unknown (0 units). Must not be
	// modified once the agent runs.
	Resources *commonpb.NodeResources

	// Version is the worker software version sent at registration. Default:
	// the main module's version from the build info, "(devel)" for a build
	// from a checkout; norsk-ctl sets its own version
	// (cmd/internal/buildinfo).
	Version string

	// HelloResponseTimeout bounds how long a session waits for the
	// manager's hello_response after sending hello. Default 10s.
	HelloResponseTimeout time.Duration

	// DialBackTimeout: a registered worker that has had no verified
	// session for this long registers again (the manager may have lost the
	// dial-back), doubling the wait each time up to MaxRetryBackoff×10.
	// Default 30s.
	DialBackTimeout time.Duration

	// RegisterTimeout bounds one ClusterMemberRegister call. Default 10s.
	RegisterTimeout time.Duration

	// RetryBackoff and MaxRetryBackoff bound the exponential backoff
	// (with jitter) between failed registration rounds. Defaults 500ms, 30s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// PendingEventLimit is how many jobs' last lifecycle events are kept
	// while no manager is connected, flushed on the next verified session.
	// Default 256; the oldest are dropped beyond it (the next hello's
	// running_jobs still tells the truth).
	PendingEventLimit int

	// OfflineInfoLines and OfflineInfoBytes bound, per (job, role), the
	// job info (output lines, container events, compose stages) kept while
	// no manager session is up; the next verified session gets it, in
	// order with the lifecycle events. Beyond a bound the oldest messages
	// go, and the session gets one "N job info lines dropped" note for the
	// job where they were. OfflineInfoTotalBytes bounds the buffer across
	// every job (the job holding the most loses its oldest first). Bytes
	// are the messages' encoded sizes. Defaults 1000 messages, 256 KiB and
	// 16 MiB; 0 keeps none (only the note).
	OfflineInfoLines      int
	OfflineInfoBytes      int
	OfflineInfoTotalBytes int

	// SessionQueue is the per-session send queue length. Job info is
	// dropped when it is full; a lifecycle event that does not fit ends the
	// session (the manager re-dials and reads the truth from hello).
	// Default 1024.
	SessionQueue int

	// ServerTLS, when set, makes the worker's gRPC server (the stream the
	// manager dials back) serve TLS only, with this configuration (a
	// certificate of role worker; with client CAs and
	// RequireAndVerifyClientCert, only managers presenting a certificate
	// of the cluster CA may open a session). Nil: plaintext. It adds to
	// the credential proofs of the handshake, it does not replace them.
	ServerTLS *tls.Config

	// ManagerTLS, when set, makes registration with the managers use TLS
	// with this configuration: the manager's certificate is verified
	// against its RootCAs and the host of each ManagerURLs entry, or
	// ManagerTLS.ServerName if set; its certificate (or
	// GetClientCertificate) is presented to a manager that requires one.
	// Nil: plaintext.
	ManagerTLS *tls.Config

	// CertSHA256, when set, is the SHA-256 of the self-signed certificate
	// ServerTLS serves (norsk-ctl --mode=worker --self-signed), sent in
	// every registration (worker_cert_sha256): the manager pins it at the
	// registration that binds the slot and accepts only it when dialling
	// back; a re-registration with another is refused. Nil for a
	// CA-signed certificate or plaintext. 32 bytes.
	CertSHA256 []byte

	// Logger receives the agent's logs. Nil logs text to stderr.
	Logger *slog.Logger

	// Runtime runs the jobs. Required.
	Runtime Runtime
}

// DefaultConfig returns a Config with production defaults. StateDir,
// Runtime and, for a cluster-slot worker, Token and ManagerURLs must still
// be set.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:7001",
		HealthInterval:        2 * time.Second,
		StopGrace:             10 * time.Second,
		Version:               buildVersion(),
		HelloResponseTimeout:  10 * time.Second,
		DialBackTimeout:       30 * time.Second,
		RegisterTimeout:       10 * time.Second,
		RetryBackoff:          500 * time.Millisecond,
		MaxRetryBackoff:       30 * time.Second,
		PendingEventLimit:     256,
		OfflineInfoLines:      1000,
		OfflineInfoBytes:      256 << 10,
		OfflineInfoTotalBytes: 16 << 20,
		SessionQueue:          1024,
		Resources:             defaultResources(),
	}
}

// defaultResources is what a worker offers when it is not told: every CPU
// it may run on as cores for pinned jobs, half of them as capacity, and
// the binary's architecture.
func defaultResources() *commonpb.NodeResources {
	cpus, err := AllowedCPUs()
	if err != nil {
		return &commonpb.NodeResources{Capacity: noderesources.DefaultCapacity(runtime.NumCPU())}
	}
	r := &commonpb.NodeResources{Capacity: noderesources.DefaultCapacity(len(cpus)), Cores: cpus}
	if arch, ok := noderesources.HostArchitecture(); ok {
		r.Architecture = &arch
	}
	return r
}

// DevConfig returns a Config for tests and --dev: loopback on a free port
// and short timeouts.
func DevConfig() Config {
	c := DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.HealthInterval = 200 * time.Millisecond
	c.StopGrace = time.Second
	c.HelloResponseTimeout = 2 * time.Second
	c.DialBackTimeout = 2 * time.Second
	c.RegisterTimeout = 2 * time.Second
	c.RetryBackoff = 20 * time.Millisecond
	c.MaxRetryBackoff = 200 * time.Millisecond
	return c
}

// Validate checks c and returns an error naming the first bad field.
func (c *Config) Validate() error {
	if c.Runtime == nil {
		return errors.New("worker: Runtime is required")
	}
	if c.StateDir == "" {
		return errors.New("worker: StateDir is required")
	}
	host, _, err := splitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("worker: Listen %q: %w", c.Listen, err)
	}
	if c.Advertise != "" {
		if _, _, err := splitAdvertise(c.Advertise); err != nil {
			return fmt.Errorf("worker: Advertise %q: %w", c.Advertise, err)
		}
	}
	if c.Token != "" && len(c.ManagerURLs) == 0 {
		return errors.New("worker: Token is set but ManagerURLs is empty (nowhere to register)")
	}
	if c.registers() && c.Advertise == "" && isUnspecifiedHost(host) {
		return fmt.Errorf("worker: Listen %q binds every interface; set Advertise to the address the manager can dial back", c.Listen)
	}
	for i, u := range c.ManagerURLs {
		if _, err := ManagerTarget(u); err != nil {
			return fmt.Errorf("worker: ManagerURLs[%d]: %w", i, err)
		}
	}
	if err := noderesources.Validate(c.Resources); err != nil {
		return fmt.Errorf("worker: Resources.%w", err)
	}
	return c.validateDurations()
}

// registers reports whether the worker registers with managers (a
// cluster-slot worker, with a Token or restarting on its stored identity)
// rather than being a mock-pool worker.
func (c *Config) registers() bool { return len(c.ManagerURLs) > 0 }

func (c *Config) validateDurations() error {
	checks := []struct {
		name string
		d    time.Duration
		min  time.Duration
	}{
		{"HealthInterval", c.HealthInterval, time.Millisecond},
		{"StopGrace", c.StopGrace, 0},
		{"HelloResponseTimeout", c.HelloResponseTimeout, time.Millisecond},
		{"DialBackTimeout", c.DialBackTimeout, time.Millisecond},
		{"RegisterTimeout", c.RegisterTimeout, time.Millisecond},
		{"RetryBackoff", c.RetryBackoff, time.Millisecond},
		{"MaxRetryBackoff", c.MaxRetryBackoff, c.RetryBackoff},
	}
	for _, ch := range checks {
		if ch.d < ch.min {
			return fmt.Errorf("worker: %s (%s) must be at least %s", ch.name, ch.d, ch.min)
		}
	}
	if c.PendingEventLimit < 1 {
		return fmt.Errorf("worker: PendingEventLimit (%d) must be at least 1", c.PendingEventLimit)
	}
	for _, b := range []struct {
		name string
		n    int
	}{{"OfflineInfoLines", c.OfflineInfoLines}, {"OfflineInfoBytes", c.OfflineInfoBytes}, {"OfflineInfoTotalBytes", c.OfflineInfoTotalBytes}} {
		if b.n < 0 {
			return fmt.Errorf("worker: %s (%d) must not be negative", b.name, b.n)
		}
	}
	if c.SessionQueue < 1 {
		return fmt.Errorf("worker: SessionQueue (%d) must be at least 1", c.SessionQueue)
	}
	return nil
}

// ManagerTarget turns a manager URL as given on the command line
// ("host:port", "grpc://host:port", "http://host:port") into a gRPC dial
// target. TLS ("https://") is not supported yet and is refused.
func ManagerTarget(u string) (string, error) {
	target := strings.TrimSpace(u)
	if strings.Contains(target, "://") {
		parsed, err := url.Parse(target)
		if err != nil {
			return "", fmt.Errorf("manager URL %q: %w", u, err)
		}
		switch parsed.Scheme {
		case "grpc", "http":
		default:
			return "", fmt.Errorf("manager URL %q: scheme %q is not supported (use host:port; TLS is not supported yet)", u, parsed.Scheme)
		}
		target = parsed.Host
	}
	if _, _, err := splitHostPort(target); err != nil {
		return "", fmt.Errorf("manager URL %q: %w", u, err)
	}
	return target, nil
}

// splitHostPort splits "host:port" and checks the port is a number in
// 0..65535.
func splitHostPort(hp string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number in 0..65535", portStr)
	}
	return host, port, nil
}

// splitAdvertise accepts "host" or "host:port"; port 0 means "the port
// bound".
func splitAdvertise(a string) (string, int, error) {
	if host, port, err := splitHostPort(a); err == nil {
		if host == "" {
			return "", 0, errors.New("host is empty")
		}
		return host, port, nil
	}
	if strings.ContainsAny(a, "/ ") {
		return "", 0, errors.New("want a host or host:port")
	}
	return strings.Trim(a, "[]"), 0, nil
}

func isUnspecifiedHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
