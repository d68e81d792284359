// Command probe is the entrypoint of the FROM-scratch test images of the
// Docker runtime tests (see test/dockerenv and
// docs/design/docker-test-images.md). It is a static, stdlib-only binary, so
// it runs in an image that holds nothing else.
//
// Usage:
//
//	probe serve [--listen ADDR] [--ignore-term] [--healthy-after DURATION]
//	probe health URL
//	probe exit CODE [--after DURATION]
//	probe sleep [--ignore-term]
//	probe oom
//
// serve answers /healthz ("ok"), /env?name=X (the value of X, 404 if unset),
// /file?path=P (the file's contents, 404 if missing), POST /write?path=P
// (writes the body to P, creating parent directories), /pid (its process
// id) and /resolve?host=H (H's addresses, one a line; 404 if it does not
// resolve), logging each request on standard output. With --healthy-after,
// /healthz answers 503 until DURATION has passed since it started.
//
// health GETs URL and exits 0 on a 200, else 1 (a healthcheck for images
// without a shell or curl). The address is --listen, else
// $NORSK_ADDR_<P> (host:port), else $NORSK_PORT_<P> (a port number: every
// interface), else ":<P>", where P is $PROBE_PORT (default 8080), the
// container port the worker resolved.
//
// serve and sleep exit 0 promptly on SIGTERM or SIGINT; with --ignore-term they
// log the signal and carry on (for kill-after-grace tests). exit prints one
// line on standard output and one on standard error, waits DURATION (default
// 0) and exits with CODE. oom allocates and touches memory until it is killed.
// Without a subcommand it runs $PROBE_MODE (default sleep), as an image
// started with no command does. A usage error exits 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// logger writes request and lifecycle lines on standard output; it is safe
// for concurrent use.
var logger = log.New(os.Stdout, "probe: ", 0)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		// No command (an image run with its defaults, like the Norsk
		// Media container): $PROBE_MODE, default sleep.
		mode := os.Getenv("PROBE_MODE")
		if mode == "" {
			mode = "sleep"
		}
		args = []string{mode}
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ExitOnError)
		listen := fs.String("listen", "", "address to listen on, host:port")
		ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM and SIGINT")
		healthyAfter := fs.Duration("healthy-after", 0, "answer /healthz with 503 until this long after starting")
		_ = fs.Parse(args)
		addr, err := listenAddr(*listen, os.Getenv)
		if err != nil {
			usage(err.Error())
		}
		os.Exit(serve(addr, *ignoreTerm, time.Now().Add(*healthyAfter)))
	case "health":
		if len(args) != 1 {
			usage("health needs one URL")
		}
		os.Exit(health(args[0]))
	case "exit":
		code, after, err := parseExit(args)
		if err != nil {
			usage(err.Error())
		}
		fmt.Fprintf(os.Stdout, "probe: exit %d after %s (stdout)\n", code, after)
		fmt.Fprintf(os.Stderr, "probe: exit %d after %s (stderr)\n", code, after)
		time.Sleep(after)
		os.Exit(code)
	case "sleep":
		fs := flag.NewFlagSet("sleep", flag.ExitOnError)
		ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM and SIGINT")
		_ = fs.Parse(args)
		term := terminated(*ignoreTerm) // before the log line tests wait for
		logger.Printf("sleeping (pid %d)", os.Getpid())
		<-term
		logger.Printf("terminated")
		os.Exit(0)
	case "oom":
		oom()
	default:
		usage("unknown subcommand " + strconv.Quote(cmd))
	}
}

// usage reports a command-line error on standard error and exits 2.
func usage(msg string) {
	fmt.Fprintf(os.Stderr, "probe: %s\nusage: probe serve [--listen ADDR] [--ignore-term] [--healthy-after D] | health URL | exit CODE [--after DURATION] | sleep [--ignore-term] | oom\n", msg)
	os.Exit(2)
}

// listenAddr picks serve's address: flag, else $NORSK_ADDR_<P>, else
// $NORSK_PORT_<P> (a port number, meaning every interface), else ":<P>",
// where P is $PROBE_PORT or 8080. A value that is not host:port (or, for
// NORSK_PORT_<P>, a port number) is an error naming where it came from.
func listenAddr(flag string, getenv func(string) string) (string, error) {
	p := getenv("PROBE_PORT")
	if p == "" {
		p = "8080"
	}
	if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("PROBE_PORT=%q is not a port number", p)
	}
	addrVar, portVar := "NORSK_ADDR_"+p, "NORSK_PORT_"+p
	switch {
	case flag != "":
		if _, _, err := net.SplitHostPort(flag); err != nil {
			return "", fmt.Errorf("--listen %q is not host:port", flag)
		}
		return flag, nil
	case getenv(addrVar) != "":
		v := getenv(addrVar)
		if _, _, err := net.SplitHostPort(v); err != nil {
			return "", fmt.Errorf("%s=%q is not host:port", addrVar, v)
		}
		return v, nil
	case getenv(portVar) != "":
		v := getenv(portVar)
		if n, err := strconv.ParseUint(v, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("%s=%q is not a port number", portVar, v)
		}
		return ":" + v, nil
	}
	return ":" + p, nil
}

// parseExit parses "CODE [--after DURATION]".
func parseExit(args []string) (code int, after time.Duration, err error) {
	if len(args) == 0 {
		return 0, 0, errors.New("missing exit code")
	}
	if code, err = strconv.Atoi(args[0]); err != nil || code < 0 || code > 255 {
		return 0, 0, fmt.Errorf("exit code %q is not a number in 0..255", args[0])
	}
	fs := flag.NewFlagSet("exit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.DurationVar(&after, "after", 0, "wait this long before exiting")
	if err := fs.Parse(args[1:]); err != nil {
		return 0, 0, err
	}
	if fs.NArg() > 0 || after < 0 {
		return 0, 0, fmt.Errorf("bad arguments after the exit code: %q", args[1:])
	}
	return code, after, nil
}

// terminated returns a channel closed on the first SIGTERM or SIGINT. With
// ignore, signals are logged and the channel never closes.
func terminated(ignore bool) <-chan struct{} {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		for s := range sigs {
			if !ignore {
				close(done)
				return
			}
			logger.Printf("ignoring %s", s)
		}
	}()
	return done
}

// serve runs the HTTP server on addr until SIGTERM/SIGINT and returns the
// exit status: 0 after a signal, 1 if listening or serving fails.
func serve(addr string, ignoreTerm bool, healthyAt time.Time) int {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Printf("listen: %v", err)
		return 1
	}
	srv := &http.Server{Handler: handlerAt(healthyAt), ReadHeaderTimeout: 10 * time.Second}
	term := terminated(ignoreTerm) // before the log line tests wait for
	logger.Printf("listening on %s (pid %d)", lis.Addr(), os.Getpid())
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(lis) }()
	select {
	case err := <-errCh:
		logger.Printf("serve: %v", err)
		return 1
	case <-term:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	logger.Printf("terminated")
	return 0
}

// health GETs url (within 5 s) and returns 0 on a 200, else 1.
func health(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: health: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "probe: health: %s\n", resp.Status)
		return 1
	}
	return 0
}

// handler serves the probe's endpoints and logs every request.
func handler() http.Handler { return handlerAt(time.Time{}) }

// handlerAt is handler whose /healthz answers 503 before healthyAt.
func handlerAt(healthyAt time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if time.Now().Before(healthyAt) {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		// A name the engine's DNS does not know is forwarded to the
		// host's resolvers, which may not answer on an offline machine.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, r.URL.Query().Get("host"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		for _, a := range addrs {
			fmt.Fprintln(w, a)
		}
	})
	mux.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, os.Getpid()) })
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		v, ok := os.LookupEnv(r.URL.Query().Get("name"))
		if !ok {
			http.Error(w, "unset", http.StatusNotFound)
			return
		}
		io.WriteString(w, v)
	})
	mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		switch {
		case errors.Is(err, os.ErrNotExist):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.Write(b)
		}
	})
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		path := r.URL.Query().Get("path")
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(path), 0o755)
		}
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger.Printf("%s %s from %s", r.Method, r.URL.RequestURI(), r.RemoteAddr)
		mux.ServeHTTP(w, r)
	})
}

// oom allocates 16 MiB chunks, touching every page and keeping them all,
// until the kernel kills the process. It never returns.
func oom() {
	const chunk = 16 << 20
	var kept [][]byte
	for {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		kept = append(kept, b)
		logger.Printf("allocated %d MiB", len(kept)*chunk>>20)
	}
}
