package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// Environment of the demo service, as the worker's process runtime sets it.
const (
	demoEnvJobID = "NORSK_JOB_ID"
	// demoEnvPort carries the host port resolved for container port 8080
	// (the runtime passes NORSK_PORT_<container port>): a port number, or
	// host:port.
	demoEnvPort = "NORSK_PORT_8080"
	// demoEnvAddr carries host:port resolved for container port 8080,
	// with the host address to bind; preferred over demoEnvPort.
	demoEnvAddr = "NORSK_ADDR_8080"
	// demoDefaultListen is used when none of --listen, NORSK_ADDR_8080
	// and NORSK_PORT_8080 is set (e.g. inside a container, which publishes
	// port 8080).
	demoDefaultListen = ":8080"
)

// newDemoCommand builds "norsk-ctl demo".
func newDemoCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Tiny example services for jobs (examples/, end-to-end tests)",
	}
	cmd.AddCommand(newDemoHTTPCommand())
	return cmd
}

// newDemoHTTPCommand builds "demo http".
func newDemoHTTPCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "http [--listen ADDR]",
		Short: "Serve \"hello from <host> job=<id>\" on / and 200 on /healthz",
		Long: `Serve a tiny HTTP service, the example "real process" of a job
(examples/hello-http): "hello from <hostname> job=<$NORSK_JOB_ID>" on /,
200 "ok" on /healthz, 404 elsewhere. Each request is logged on standard
output. It stops cleanly on SIGINT/SIGTERM.

The address is --listen if given, else $NORSK_ADDR_8080 (host:port the
worker resolved for container port 8080), else $NORSK_PORT_8080 (a port
number means every interface), else ":8080".`,
		Args: ctlArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// No ctlEnv: the demo needs no manager, so a stray
			// NORSK_MANAGER_URL in a job's environment cannot break it.
			addr, err := demoListenAddr(listen, os.Getenv(demoEnvAddr), os.Getenv(demoEnvPort))
			if err != nil {
				return ctlFail(cmd, err)
			}
			return ctlFail(cmd, runDemoHTTP(cmd.Context(), addr, os.Getenv(demoEnvJobID), cmd.OutOrStdout()))
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "",
		"address to listen on, host:port (default: $"+demoEnvAddr+", the host:port a worker resolved for container port 8080; else $"+demoEnvPort+", a port number meaning every interface; else "+demoDefaultListen+")")
	return cmd
}

// demoListenAddr picks the listen address: --listen (flag), else the
// value of NORSK_ADDR_8080 (envAddr, host:port), else that of
// NORSK_PORT_8080 (envPort: a port number, meaning every interface, or
// host:port), else demoDefaultListen. A bad value is an error naming its
// flag or variable.
func demoListenAddr(flag, envAddr, envPort string) (string, error) {
	switch {
	case flag != "":
		if _, _, err := net.SplitHostPort(flag); err != nil {
			return "", ctlUsagef("--listen: %q is not host:port (e.g. 127.0.0.1:18080 or :18080)", flag)
		}
		return flag, nil
	case envAddr != "":
		if _, _, err := net.SplitHostPort(envAddr); err != nil {
			return "", fmt.Errorf("%s=%q is not host:port", demoEnvAddr, envAddr)
		}
		return envAddr, nil
	case envPort == "":
		return demoDefaultListen, nil
	}
	if n, err := strconv.ParseUint(envPort, 10, 16); err == nil && n > 0 {
		return ":" + envPort, nil
	}
	if _, _, err := net.SplitHostPort(envPort); err == nil {
		return envPort, nil
	}
	return "", fmt.Errorf("%s=%q is neither a port number nor host:port", demoEnvPort, envPort)
}

// runDemoHTTP serves the demo on addr until ctx is done, logging to out.
func runDemoHTTP(ctx context.Context, addr, jobID string, out io.Writer) error {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("demo http: %w", err)
	}
	logw := &demoLockedWriter{w: out}
	srv := &http.Server{Handler: demoHandler(host, jobID, logw), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(logw, "demo http: listening on %s (host %s, job %s)\n", lis.Addr(), host, jobID)
	serveErrCh := make(chan error, 1)
	go func() { serveErrCh <- srv.Serve(lis) }()
	select {
	case err := <-serveErrCh:
		return fmt.Errorf("demo http: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("demo http: shutdown: %w", err)
	}
	if err := <-serveErrCh; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("demo http: %w", err)
	}
	fmt.Fprintf(logw, "demo http: stopped\n")
	return nil
}

// demoHandler answers / and /healthz and logs every request line to log.
func demoHandler(host, jobID string, log io.Writer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s job=%s\n", host, jobID)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &demoStatusRecorder{ResponseWriter: w, status: http.StatusOK}
		mux.ServeHTTP(rec, r)
		fmt.Fprintf(log, "%s %s %s %s %d %q\n", time.Now().UTC().Format(time.RFC3339),
			r.RemoteAddr, r.Method, r.URL.RequestURI(), rec.status, r.UserAgent())
	})
}

// demoStatusRecorder remembers the status code written.
type demoStatusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *demoStatusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// demoLockedWriter serialises writes from concurrent request handlers.
type demoLockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *demoLockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
