package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the probe itself when the test binary is re-executed with
// PROBE_TEST_MAIN=1, so the signal and exit tests need no go build.
func TestMain(m *testing.M) {
	if os.Getenv("PROBE_TEST_MAIN") == "1" {
		os.Args = append([]string{"probe"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

func TestListenAddr(t *testing.T) {
	tests := []struct {
		name    string
		flag    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "default", want: ":8080"},
		{name: "flag wins", flag: "127.0.0.1:9", env: map[string]string{"NORSK_ADDR_8080": "127.0.0.1:1"}, want: "127.0.0.1:9"},
		{name: "addr", env: map[string]string{"NORSK_ADDR_8080": "127.0.0.1:18080", "NORSK_PORT_8080": "1"}, want: "127.0.0.1:18080"},
		{name: "port", env: map[string]string{"NORSK_PORT_8080": "18080"}, want: ":18080"},
		{name: "probe port", env: map[string]string{"PROBE_PORT": "7000", "NORSK_PORT_7000": "17000", "NORSK_PORT_8080": "1"}, want: ":17000"},
		{name: "probe port default", env: map[string]string{"PROBE_PORT": "7000"}, want: ":7000"},
		{name: "bad flag", flag: "nope", wantErr: "--listen"},
		{name: "bad addr", env: map[string]string{"NORSK_ADDR_8080": "18080"}, wantErr: "NORSK_ADDR_8080"},
		{name: "bad port", env: map[string]string{"NORSK_PORT_8080": "x"}, wantErr: "NORSK_PORT_8080"},
		{name: "bad probe port", env: map[string]string{"PROBE_PORT": "http"}, wantErr: "PROBE_PORT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := listenAddr(tc.flag, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("listenAddr = %q, %v; want error mentioning %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("listenAddr = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseExit(t *testing.T) {
	tests := []struct {
		args    []string
		code    int
		after   time.Duration
		wantErr bool
	}{
		{args: []string{"3"}, code: 3},
		{args: []string{"0", "--after", "250ms"}, after: 250 * time.Millisecond},
		{args: []string{"7", "--after=1s"}, code: 7, after: time.Second},
		{args: []string{"--after=1s", "7"}, wantErr: true},
		{args: nil, wantErr: true},
		{args: []string{"256"}, wantErr: true},
		{args: []string{"x"}, wantErr: true},
		{args: []string{"1", "2"}, wantErr: true},
		{args: []string{"1", "--after", "-1s"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, after, err := parseExit(tc.args)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseExit(%q) = %d, %s; want an error", tc.args, code, after)
				}
				return
			}
			if err != nil || code != tc.code || after != tc.after {
				t.Fatalf("parseExit(%q) = %d, %s, %v; want %d, %s", tc.args, code, after, err, tc.code, tc.after)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	t.Setenv("PROBE_TEST_VALUE", "hello")
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(dir, "sub", "written")
	tests := []struct {
		method, target, body string
		wantCode             int
		wantBody             string
	}{
		{"GET", "/healthz", "", 200, "ok"},
		{"GET", "/pid", "", 200, strconv.Itoa(os.Getpid())},
		{"GET", "/env?name=PROBE_TEST_VALUE", "", 200, "hello"},
		{"GET", "/env?name=PROBE_TEST_UNSET_VALUE", "", 404, ""},
		{"GET", "/file?path=" + existing, "", 200, "content"},
		{"GET", "/file?path=" + filepath.Join(dir, "missing"), "", 404, ""},
		{"GET", "/write?path=" + written, "", 405, ""},
		{"POST", "/write?path=" + written, "data", 200, "ok"},
		{"POST", "/write?path=", "data", 500, ""},
		{"GET", "/file?path=" + written, "", 200, "data"},
		{"GET", "/nope", "", 404, ""},
	}
	h := handler()
	for _, tc := range tests { // in order: the write precedes its read
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body)))
		if rec.Code != tc.wantCode || (tc.wantBody != "" && rec.Body.String() != tc.wantBody) {
			t.Errorf("%s %s = %d %q; want %d %q", tc.method, tc.target, rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
		}
	}
}

// startProbe runs the probe (this test binary in probe mode) with args,
// sending its stdout and stderr to stdout. It returns the command and a
// channel delivering the result of its Wait; a cleanup kills it.
func startProbe(t *testing.T, stdout io.Writer, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = probeEnv()
	cmd.Stdout = stdout
	cmd.Stderr = stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd, done
}

// waitLine reads lines until one contains want and returns it, failing the
// test after 10 s or when the output ends.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line containing %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line containing %q within 10s", want)
		}
	}
}

// pipeLines returns a writer and a channel carrying each line written to it.
func pipeLines(t *testing.T) (io.Writer, <-chan string) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(pr)
		for s.Scan() {
			ch <- s.Text()
		}
	}()
	return pw, ch
}

func TestSignals(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		ready      string
		ignoreTerm bool
	}{
		{"serve", []string{"serve", "--listen", "127.0.0.1:0"}, "listening on", false},
		{"serve ignore-term", []string{"serve", "--listen", "127.0.0.1:0", "--ignore-term"}, "listening on", true},
		{"sleep", []string{"sleep"}, "sleeping", false},
		{"sleep ignore-term", []string{"sleep", "--ignore-term"}, "sleeping", true},
		{"no command: sleep", nil, "sleeping", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, lines := pipeLines(t)
			cmd, done := startProbe(t, out, tc.args...)
			waitLine(t, lines, tc.ready)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.ignoreTerm {
				waitLine(t, lines, "ignoring terminated")
				return // the cleanup kills it
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exit after SIGTERM: %v; want status 0", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still running 10s after SIGTERM")
			}
		})
	}
}

func TestExit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "exit", "3", "--after", "50ms")
	cmd.Env = probeEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit status %d (%v); want 3", code, err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("exited after %s; want at least 50ms", d)
	}
	if !strings.Contains(stdout.String(), "(stdout)") || !strings.Contains(stderr.String(), "(stderr)") {
		t.Errorf("stdout %q, stderr %q; want one line on each", stdout.String(), stderr.String())
	}
}

// probeEnv is the environment of a re-executed probe: probe mode, and no
// one-second exit delay of the race detector.
func probeEnv() []string {
	return append(os.Environ(), "PROBE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
}
