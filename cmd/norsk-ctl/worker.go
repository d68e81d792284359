package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/process"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
)

// workerOptions holds the flags of --mode=worker.
type workerOptions struct {
	token          string
	managerURLs    string
	listen         string
	advertise      string
	stateDir       string
	healthInterval time.Duration
	stopGrace      time.Duration
	dialBack       time.Duration
	runtime        string
	logLevel       string
}

// addWorkerFlags adds the flags of --mode=worker to cmd (the root command).
func addWorkerFlags(cmd *cobra.Command, o *workerOptions) {
	def := worker.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&o.token, "token", "",
		"worker mode: cluster-slot registration token (from RegisterClusterNode); without it the worker is a mock-pool worker that registers nowhere and waits to be dialed")
	f.StringVar(&o.managerURLs, "manager-url", "",
		"worker mode: comma-separated manager gRPC addresses (host:port) to register with, tried in order")
	f.StringVar(&o.listen, "listen", def.Listen,
		"worker mode: host:port the worker's gRPC server listens on (the manager dials it back)")
	f.StringVar(&o.advertise, "advertise", "",
		"worker mode: host (or host:port) registered for dial-back (default: the --listen host)")
	f.StringVar(&o.stateDir, "state-dir", "",
		"worker mode: directory for the node identity and the jobs' state (default $HOME/.norsk-worker)")
	f.DurationVar(&o.healthInterval, "health-interval", def.HealthInterval,
		"worker mode: interval between health messages to the manager")
	f.DurationVar(&o.stopGrace, "stop-grace", def.StopGrace,
		"worker mode: time a service gets to exit after SIGTERM before it is killed")
	f.DurationVar(&o.dialBack, "dial-back-timeout", def.DialBackTimeout,
		"worker mode: register again when no manager session was established for this long (a worker of a deregistered slot learns it then and exits)")
	f.StringVar(&o.runtime, "runtime", "process",
		`worker mode: how services run: "process" (local process groups)`)
	f.StringVar(&o.logLevel, "log-level", "info", "worker mode: log level: debug, info, warn or error")
}

// runWorker runs the worker agent until ctx is cancelled (SIGINT/SIGTERM).
// Stopping the worker never stops its jobs: the next worker started with
// the same --state-dir re-adopts them.
//
// Exit codes follow the operator commands': 2 for a bad flag, 7 when the
// manager refuses the token or credential, 5 when the slot is bound to
// another worker, 1 otherwise.
func runWorker(ctx context.Context, o *workerOptions) error {
	cfg, err := o.config()
	if err != nil {
		return workerExit(ctlExitUsage, err)
	}
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		return workerExit(ctlExitUsage, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = logger

	rtCfg := process.DefaultConfig()
	rtCfg.StateDir = filepath.Join(cfg.StateDir, "process")
	rtCfg.Environ = os.Environ()
	rtCfg.FailStopGrace = cfg.StopGrace
	rtCfg.Logger = logger
	rt, err := process.New(rtCfg)
	if err != nil {
		return fmt.Errorf("--state-dir %q: %w", cfg.StateDir, err)
	}
	defer rt.Shutdown() // leaves every job running
	cfg.Runtime = rt

	agent, err := worker.New(cfg)
	if err != nil {
		return err
	}
	logger.Info("starting worker", "version", cfg.Version, "state_dir", cfg.StateDir, "runtime", o.runtime,
		"managers", cfg.ManagerURLs, "mock_pool", cfg.Token == "")
	err = agent.Run(ctx)
	var rej *worker.RegistrationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rej):
		code := ctlExitUnauthorised
		switch rej.Code {
		case codes.InvalidArgument:
			code = ctlExitUsage
		case codes.AlreadyExists:
			code = ctlExitExists
		}
		return workerExit(code, fmt.Errorf("cannot join the cluster: %w", err))
	default:
		return err
	}
}

// workerExit reports err on stderr and ends norsk-ctl with code.
func workerExit(code int, err error) error {
	fmt.Fprintln(os.Stderr, "norsk-ctl:", err)
	return &exitError{code: code}
}

// config turns the flags into a worker.Config (without Logger and
// Runtime), with errors naming the flag at fault.
func (o *workerOptions) config() (worker.Config, error) {
	cfg := worker.DefaultConfig()
	urls := splitList(o.managerURLs)
	switch {
	case o.token != "" && len(urls) == 0:
		return cfg, errors.New("--token needs --manager-url: the manager(s) to register with")
	case o.token == "" && len(urls) > 0:
		return cfg, errors.New("--manager-url needs --token: a worker without a token registers nowhere (it is a mock-pool worker that waits to be dialed)")
	}
	for _, u := range urls {
		if _, err := worker.ManagerTarget(u); err != nil {
			return cfg, fmt.Errorf("--manager-url: %w", err)
		}
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return cfg, fmt.Errorf("--listen %q: want host:port: %w", o.listen, err)
	}
	if ip := net.ParseIP(host); o.token != "" && o.advertise == "" && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return cfg, fmt.Errorf("--advertise is required when --listen (%s) binds every interface: give the address the manager can dial back", o.listen)
	}
	switch {
	case o.runtime != "process":
		return cfg, fmt.Errorf("--runtime %q is not supported: the only runtime is \"process\" (\"docker\" is planned)", o.runtime)
	case o.healthInterval <= 0:
		return cfg, fmt.Errorf("--health-interval %s must be positive", o.healthInterval)
	case o.stopGrace < 0:
		return cfg, fmt.Errorf("--stop-grace %s must not be negative", o.stopGrace)
	}
	stateDir := o.stateDir
	if stateDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, fmt.Errorf("--state-dir is required: no home directory to default to: %w", err)
		}
		stateDir = filepath.Join(home, ".norsk-worker")
	}
	cfg.Token, cfg.ManagerURLs = o.token, urls
	cfg.Listen, cfg.Advertise, cfg.StateDir = o.listen, o.advertise, stateDir
	cfg.HealthInterval, cfg.StopGrace, cfg.DialBackTimeout = o.healthInterval, o.stopGrace, o.dialBack
	return cfg, nil
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
