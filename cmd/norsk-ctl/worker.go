package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/docker"
	"github.com/norsk-oss/norsk-manager/worker/process"
	"github.com/norsk-oss/norsk-manager/worker/template"
)

// Exit codes of --mode=worker (documented in workerExitCodesHelp). They
// reuse the operator commands' numbers where the meaning is the same.
const (
	workerExitFailure      = ctlExitFailure      // any other failure
	workerExitUsage        = ctlExitUsage        // bad flag, --state-dir in use, request rejected as invalid
	workerExitSlotBound    = ctlExitExists       // the cluster slot is bound to another worker
	workerExitUnauthorised = ctlExitUnauthorised // the token is unknown or revoked
)

// workerExitCodesHelp is appended to the root command's help.
const workerExitCodesHelp = `
Exit codes of --mode=worker:
  0    stopped by SIGINT or SIGTERM (its jobs keep running)
  1    any other failure (e.g. --listen address in use, unreadable --state-dir
       or --template-dir)
  2    usage error (bad flag), --state-dir in use by another worker,
       --manager-url without --token and no node identity in --state-dir,
       a node identity in --state-dir but no --manager-url (nor
       $NORSK_MANAGER_URL), or the manager rejected the registration
       request as invalid
  5    the cluster slot of --token is bound to another worker, or another
       worker at another address holds a live session with this node's
       identity (a copied --state-dir)
  7    the manager refused --token or the stored credential: unknown, or
       revoked (slot deregistered), or the node was terminated by an
       operator. For a deregistered slot or a terminated node the worker
       first stops every job it runs (no manager will manage them again)
       and lists them; for an unknown token or credential it stops none`

// workerOptions holds the flags of --mode=worker.
type workerOptions struct {
	token          string
	managerURLs    string
	managerURLsSet bool // --manager-url was given (else $NORSK_MANAGER_URL applies)
	listen         string
	advertise      string
	stateDir       string
	healthInterval time.Duration
	stopGrace      time.Duration
	dialBack       time.Duration
	runtime        string
	dockerNetwork  string
	mediaImages    []string
	templateDir    string
	jobUser        string // --job-user
	jobDir         string // --job-dir
	logLevel       string
	resources      resourceFlags
	tls            workerTLS
}

// addWorkerFlags adds the flags of --mode=worker to cmd (the root command).
func addWorkerFlags(cmd *cobra.Command, o *workerOptions) {
	def := worker.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&o.token, "token", "",
		"worker mode: cluster-slot registration token (from \"norsk-ctl slot register\"), needed at the first start only: "+
			"a worker restarting on its --state-dir registers with the node credential stored there (with --manager-url, default $"+ctlEnvManagerURL+"). "+
			"A token other than the one the stored identity came with registers a new node. "+
			"Without --token, --manager-url and a stored identity the worker is a mock-pool worker that registers nowhere and waits to be dialed")
	f.StringVar(&o.managerURLs, ctlFlagManagerURL, "",
		"manager address host:port, or a comma-separated list of the managers of one cluster (default $"+ctlEnvManagerURL+", else "+client.DefaultURL+"). "+
			"Worker mode: the managers to register with, tried in order (default $"+ctlEnvManagerURL+" for a worker with --token or a node identity in --state-dir); "+
			"without --token the worker registers with the credential in --state-dir; a worker with neither, nor an identity, registers nowhere (mock pool)")
	f.StringVar(&o.listen, "listen", def.Listen,
		"worker mode: host:port the worker's gRPC server listens on (the manager dials it back)")
	f.StringVar(&o.advertise, "advertise", "",
		"worker mode: host (or host:port) registered for dial-back (default: the --listen host)")
	f.StringVar(&o.stateDir, "state-dir", "",
		"worker mode: directory for the node identity and the jobs' state, locked by one worker at a time (default $HOME/.norsk-worker)")
	f.DurationVar(&o.healthInterval, "health-interval", def.HealthInterval,
		"worker mode: interval between health messages to the manager")
	f.DurationVar(&o.stopGrace, "stop-grace", def.StopGrace,
		"worker mode: time a service gets to exit after SIGTERM before it is killed")
	f.DurationVar(&o.dialBack, "dial-back-timeout", def.DialBackTimeout,
		"worker mode: register again when no manager session was established for this long (a worker of a deregistered slot learns it then and exits)")
	f.StringVar(&o.runtime, "runtime", "process",
		`worker mode: how services run: "process" (each service's command as a local process group) or "docker" (each service's image as a container, through the Docker Engine API at $DOCKER_HOST or the local socket; while the engine does not answer, the worker reports it in its health and refuses new jobs)`)
	f.StringVar(&o.dockerNetwork, "docker-network", docker.NetworkJob,
		`worker mode, --runtime=docker: "job" (a bridge network per job and role; port mappings are published on the host) or "host" (containers share the host's network; services bind the resolved host ports given in NORSK_PORT_*/NORSK_ADDR_*)`)
	f.StringArrayVar(&o.mediaImages, "media-image", nil,
		"worker mode, --runtime=docker: VERSION=IMAGE, the Norsk Media image for a norsk_media_version (RECOMMENDED, LATEST, PREVIOUS_RECOMMENDED, LTS); repeatable or comma-separated. Without any, jobs run only their own services")
	f.StringVar(&o.templateDir, "template-dir", "",
		"worker mode, --runtime=docker: the product-template catalogue, NAME/VERSION/compose.yaml (with an optional .env and template.json; docs/design/product-templates.md), "+
			"read once at start and reported to the manager; a version using an unsupported compose key is logged and left out. Without it, the worker offers no templates")
	f.StringVar(&o.logLevel, "log-level", "info", "worker mode: log level: debug, info, warn or error")
	addJobUserFlags(cmd, o)
	addResourceFlags(cmd, &o.resources)
	addWorkerTLSFlags(cmd, &o.tls)
}

// runWorker runs the worker agent until ctx is cancelled (SIGINT/SIGTERM),
// reporting a failure on stderr. Stopping the worker never stops its jobs:
// the next worker started with the same --state-dir re-adopts them.
//
// The exit codes are workerExitCodesHelp's: 2 for a bad flag, a --state-dir
// another worker holds, --manager-url without --token and no stored
// identity, a stored identity without a manager URL, or a registration the
// manager rejects as invalid; 5 when the cluster slot is bound to another
// worker or the identity is in use elsewhere (PermissionDenied); 7 when the
// manager refuses the token or credential (Unauthenticated: unknown or
// revoked) or the node was terminated — after stopping every job when the
// slot was deregistered or the node terminated
// (worker.RegistrationError.NodeRetired); 1 otherwise.
func runWorker(ctx context.Context, stderr io.Writer, o *workerOptions) error {
	fail := func(code int, err error) error {
		fmt.Fprintln(stderr, "norsk-ctl:", err)
		return &exitError{code: code}
	}
	cfg, err := o.config()
	if err != nil {
		return fail(workerExitUsage, err)
	}
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		return fail(workerExitUsage, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = logger
	jobs, err := o.jobIsolation(cfg.StateDir, os.Geteuid())
	if err == nil {
		err = jobs.checkSecretsHidden(o.tls.key)
	}
	if err != nil {
		return fail(workerExitUsage, err)
	}
	jobs.log(logger)
	var certs *pki.Reloader
	if cfg.ServerTLS, cfg.ManagerTLS, certs, err = o.tls.load(logger, &cfg); err != nil {
		return fail(workerExitUsage, err)
	}
	tlsCtx, stopTLS := context.WithCancel(ctx)
	tlsDone := make(chan struct{})
	go func() { defer close(tlsDone); watchWorkerTLS(tlsCtx, logger, certs) }()
	defer func() { stopTLS(); <-tlsDone }()

	templates, err := o.loadTemplates(ctx, logger)
	if err != nil {
		return fail(workerExitFailure, err)
	}
	cfg.Resources = withTemplates(cfg.Resources, templates)
	if err := noderesources.Validate(cfg.Resources); err != nil {
		// The manager would refuse every registration and hello (e.g. a
		// catalogue beyond its limits): say so now, naming the flag.
		return fail(workerExitUsage, fmt.Errorf("--template-dir %s: %w", o.templateDir, err))
	}
	rt, shutdown, err := o.newRuntime(ctx, cfg, logger, templates, jobs)
	if err != nil {
		return fail(workerFailure(cfg.StateDir, err))
	}
	defer shutdown() // leaves every job running
	cfg.Runtime = rt

	agent, err := worker.New(cfg)
	if err != nil {
		return fail(workerFailure(cfg.StateDir, err))
	}
	logger.Info("starting worker", "version", cfg.Version, "state_dir", cfg.StateDir, "runtime", o.runtime,
		"managers", cfg.ManagerURLs, "mock_pool", len(cfg.ManagerURLs) == 0,
		"capacity", cfg.Resources.GetCapacity(), "gpu_capacity", cfg.Resources.GetGpuCapacity(), "zone", cfg.Resources.GetZone(),
		"templates", len(cfg.Resources.GetTemplates()),
		"tls_serve", cfg.ServerTLS != nil, "tls_register", cfg.ManagerTLS != nil, "self_signed", cfg.CertSHA256 != nil)
	if err := agent.Run(ctx); err != nil {
		return fail(workerFailure(cfg.StateDir, err))
	}
	return nil
}

// loadTemplates loads the catalogue of --template-dir (nil without it). A
// template version that cannot be offered is logged and left out; a
// directory that cannot be read is an error naming the flag.
func (o *workerOptions) loadTemplates(ctx context.Context, logger *slog.Logger) (*template.Catalogue, error) {
	if o.templateDir == "" {
		return nil, nil
	}
	c, err := template.LoadCatalogue(ctx, o.templateDir, logger)
	if err != nil {
		return nil, fmt.Errorf("--template-dir %s: %w", o.templateDir, err)
	}
	if len(c.Offers()) == 0 {
		logger.Warn("no product template offered", "template_dir", c.Dir(), "refused", len(c.Refused()))
	}
	return c, nil
}

// withTemplates returns res with the catalogue's offers in templates (the
// worker's hello and registration carry them), res itself when there is
// no catalogue.
func withTemplates(res *commonpb.NodeResources, c *template.Catalogue) *commonpb.NodeResources {
	if c == nil {
		return res
	}
	out := &commonpb.NodeResources{}
	if res != nil {
		out = proto.Clone(res).(*commonpb.NodeResources)
	}
	out.Templates = c.Offers()
	return out
}

// newRuntime creates the runtime --runtime selects over its directory
// under the worker's state directory (process/ or docker/), and returns
// its Shutdown. templates (nil: none) goes to the Docker runtime, which
// may bind-mount nothing of the state directory nor the TLS key; jobs (the
// job user and directory) to the process runtime.
func (o *workerOptions) newRuntime(ctx context.Context, cfg worker.Config, logger *slog.Logger, templates *template.Catalogue, jobs jobIsolation) (worker.Runtime, func(), error) {
	if o.runtime == "docker" {
		dc := docker.DefaultConfig()
		dc.Templates = templates
		dc.StateDir = filepath.Join(cfg.StateDir, "docker")
		dc.Network = o.dockerNetwork
		dc.FailStopGrace = cfg.StopGrace
		dc.Logger = logger
		dc.MediaImages, _ = docker.ParseMediaImages(o.mediaImages) // checked by config
		dc.ProtectedPaths = []string{cfg.StateDir}
		if o.tls.key != "" {
			dc.ProtectedPaths = append(dc.ProtectedPaths, o.tls.key)
		}
		rt, err := docker.New(ctx, dc)
		if err != nil {
			return nil, nil, stateDirError(dc.StateDir, err)
		}
		return rt, rt.Shutdown, nil
	}
	pc := process.DefaultConfig()
	pc.StateDir = filepath.Join(cfg.StateDir, "process")
	pc.Environ = jobEnviron(os.Environ())
	pc.FailStopGrace = cfg.StopGrace
	pc.Logger = logger
	pc.JobUser, pc.JobDir = jobs.user, jobs.dir
	rt, err := process.New(pc)
	if errors.Is(err, process.ErrBadJobDir) {
		return nil, nil, fmt.Errorf("--job-dir: %w", err)
	}
	if err != nil {
		return nil, nil, stateDirError(cfg.StateDir, err)
	}
	return rt, rt.Shutdown, nil
}

// stateDirError names the state directory in a runtime's error about it
// (not in a lock conflict, which workerFailure words, nor in an engine that
// does not answer).
func stateDirError(dir string, err error) error {
	var pathErr *os.PathError
	if errors.Is(err, worker.ErrStateDirInUse) || !errors.As(err, &pathErr) {
		return err
	}
	return fmt.Errorf("--state-dir %s: %w", dir, err)
}

// workerFailure turns an error of the worker into the message for the
// operator and the exit code.
func workerFailure(stateDir string, err error) (int, error) {
	if inUse, ok := errors.AsType[*worker.StateDirInUseError](err); ok {
		holder := "another process"
		if inUse.PID > 0 {
			holder = fmt.Sprintf("another worker (pid %d)", inUse.PID)
		}
		return workerExitUsage, fmt.Errorf("--state-dir %s is in use by %s: stop that worker, or give this one its own --state-dir", stateDir, holder)
	}
	if errors.Is(err, worker.ErrNoStoredIdentity) || errors.Is(err, worker.ErrIdentityWithoutManager) {
		return workerExitUsage, err
	}
	if rej, ok := errors.AsType[*worker.RegistrationError](err); ok {
		code := workerExitUnauthorised
		switch rej.Code {
		case codes.InvalidArgument:
			code = workerExitUsage
		case codes.PermissionDenied, codes.AlreadyExists:
			code = workerExitSlotBound
			if rej.Reason == workerauth.ReasonNodeTerminated {
				code = workerExitUnauthorised
			}
		}
		return code, fmt.Errorf("cannot join the cluster: %w", err)
	}
	return workerExitFailure, err
}

// config turns the flags into a worker.Config (without Logger and
// Runtime), with errors naming the flag at fault.
func (o *workerOptions) config() (worker.Config, error) {
	cfg := worker.DefaultConfig()
	cfg.Version = buildinfo.String()
	stateDir := o.stateDir
	if stateDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, fmt.Errorf("--state-dir is required: no home directory to default to: %w", err)
		}
		stateDir = filepath.Join(home, ".norsk-worker")
	}
	urls, fromEnv, err := o.managers(stateDir)
	if err != nil {
		return cfg, err
	}
	for _, u := range urls {
		if _, err := worker.ManagerTarget(u); err != nil {
			if fromEnv {
				return cfg, fmt.Errorf("$%s (the default of --manager-url): %w", ctlEnvManagerURL, err)
			}
			return cfg, fmt.Errorf("--manager-url: %w", err)
		}
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return cfg, fmt.Errorf("--listen %q: want host:port: %w", o.listen, err)
	}
	if ip := net.ParseIP(host); len(urls) > 0 && o.advertise == "" && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return cfg, fmt.Errorf("--advertise is required when --listen (%s) binds every interface: give the address the manager can dial back", o.listen)
	}
	switch {
	case o.runtime != "process" && o.runtime != "docker":
		return cfg, fmt.Errorf("--runtime %q is not supported: want \"process\" or \"docker\"", o.runtime)
	case o.runtime == "docker" && o.dockerNetwork != docker.NetworkJob && o.dockerNetwork != docker.NetworkHost:
		return cfg, fmt.Errorf("--docker-network %q: want %q or %q", o.dockerNetwork, docker.NetworkJob, docker.NetworkHost)
	case o.runtime != "docker" && len(o.mediaImages) > 0:
		return cfg, errors.New("--media-image needs --runtime=docker")
	case o.runtime != "docker" && o.templateDir != "":
		return cfg, errors.New("--template-dir needs --runtime=docker: product templates run as containers")
	}
	if _, err := docker.ParseMediaImages(o.mediaImages); err != nil {
		return cfg, fmt.Errorf("--media-image %w", err)
	}
	switch {
	case o.healthInterval <= 0:
		return cfg, fmt.Errorf("--health-interval %s must be positive", o.healthInterval)
	case o.stopGrace < 0:
		return cfg, fmt.Errorf("--stop-grace %s must not be negative", o.stopGrace)
	}
	if cfg.Resources, err = o.resources.resources(hostCPUs()); err != nil {
		return cfg, err
	}
	cfg.Token, cfg.ManagerURLs = o.token, urls
	cfg.Listen, cfg.Advertise, cfg.StateDir = o.listen, o.advertise, stateDir
	cfg.HealthInterval, cfg.StopGrace, cfg.DialBackTimeout = o.healthInterval, o.stopGrace, o.dialBack
	return cfg, nil
}

// managers returns the managers the worker registers with, and whether
// they came from $NORSK_MANAGER_URL, by this precedence:
//
//   - --manager-url, when given (with a token: the first registration;
//     without one: a restart, which needs the node identity in stateDir);
//   - else $NORSK_MANAGER_URL, for a worker with a token or one whose
//     stateDir holds a node identity (a slot worker restarting without its
//     token, as the operator commands find their manager);
//   - else none: a mock-pool worker, which is refused if stateDir holds an
//     identity (it would re-adopt that node's jobs outside the node).
//
// A mock-pool worker (no token, no identity) ignores $NORSK_MANAGER_URL,
// which is usually set for the operator commands. Only the existence of
// identity.json is checked here, before the runtime touches the state
// directory; the agent reads it (and refuses a corrupt one) when it runs.
func (o *workerOptions) managers(stateDir string) (urls []string, fromEnv bool, err error) {
	identityPath := filepath.Join(stateDir, worker.IdentityFile)
	_, statErr := os.Stat(identityPath)
	hasIdentity := !errors.Is(statErr, fs.ErrNotExist)
	urls = splitList(o.managerURLs)
	if !o.managerURLsSet && len(urls) == 0 && (o.token != "" || hasIdentity) {
		urls, fromEnv = splitList(os.Getenv(ctlEnvManagerURL)), true
	}
	switch {
	case o.token != "" && len(urls) == 0:
		return nil, false, errors.New("--token needs --manager-url (or $" + ctlEnvManagerURL + "): the manager(s) to register with")
	case o.token == "" && len(urls) > 0 && !hasIdentity:
		return nil, false, fmt.Errorf("--manager-url without --token: --state-dir %s holds no node identity (%s, written at the first registration with --token): "+
			"give --token of a cluster slot (norsk-ctl slot register NAME), or the --state-dir the worker registered with", stateDir, worker.IdentityFile)
	case o.token == "" && len(urls) == 0 && hasIdentity:
		return nil, false, fmt.Errorf("--state-dir %s holds the identity of %s (%s): it is a cluster-slot worker's, which registers with the credential stored there; "+
			"give --manager-url (or $%s) to restart it as that node, or give a mock-pool worker a --state-dir of its own",
			stateDir, storedNode(stateDir), worker.IdentityFile, ctlEnvManagerURL)
	}
	return urls, fromEnv, nil
}

// storedNode names the node whose identity stateDir holds: "node ID
// (slot NAME)", or the file's trouble if it cannot be read.
func storedNode(stateDir string) string {
	id, ok, err := worker.ReadIdentity(stateDir)
	switch {
	case err != nil:
		return "a node (the file cannot be used: " + err.Error() + ")"
	case !ok:
		return "a node"
	case id.NodeName != "":
		return fmt.Sprintf("node %s (slot %q)", id.NodeID, id.NodeName)
	}
	return "node " + string(id.NodeID)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
