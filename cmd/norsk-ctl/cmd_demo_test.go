package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestDemoListenAddr(t *testing.T) {
	cases := []struct {
		name, flag, envAddr, envPort string
		want                         string
		wantErr                      string // in the error; "" for none
	}{
		{name: "flag wins", flag: "127.0.0.1:9000", envAddr: "127.0.0.1:18080", envPort: "18080", want: "127.0.0.1:9000"},
		{name: "flag any interface", flag: ":9000", want: ":9000"},
		{name: "env addr", envAddr: "127.0.0.1:18080", envPort: "18080", want: "127.0.0.1:18080"},
		{name: "env port", envPort: "18080", want: ":18080"},
		{name: "env port host:port", envPort: "127.0.0.1:18080", want: "127.0.0.1:18080"},
		{name: "default", want: demoDefaultListen},
		{name: "bad flag", flag: "9000", wantErr: "--listen"},
		{name: "bad env addr", envAddr: "18080", envPort: "18080", wantErr: demoEnvAddr},
		{name: "bad env port", envPort: "eighty", wantErr: demoEnvPort},
		{name: "env port zero", envPort: "0", wantErr: demoEnvPort},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := demoListenAddr(tc.flag, tc.envAddr, tc.envPort)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("demoListenAddr(%q, %q, %q) = %q, %v; want an error naming %s", tc.flag, tc.envAddr, tc.envPort, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("demoListenAddr(%q, %q, %q) = %q, %v; want %q", tc.flag, tc.envAddr, tc.envPort, got, err, tc.want)
			}
		})
	}
}

func TestDemoHandler(t *testing.T) {
	var log strings.Builder
	h := demoHandler("host-a", "job-7", &demoLockedWriter{w: &log})
	cases := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/", http.StatusOK, "hello from host-a job=job-7\n"},
		{"/healthz", http.StatusOK, "ok\n"},
		{"/elsewhere", http.StatusNotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.wantCode || (tc.wantBody != "" && rec.Body.String() != tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
	if !regexp.MustCompile(`(?m)^\S+ 192\.0\.2\.1:1234 GET /elsewhere 404 ""$`).MatchString(log.String()) {
		t.Errorf("request log:\n%s", log.String())
	}
}

// TestCtl_DemoHTTP runs "demo http" until interrupted and talks to it.
func TestCtl_DemoHTTP(t *testing.T) {
	t.Setenv(demoEnvJobID, "hello-http")
	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() { doneCh <- runCtlTo(t, ctx, "", out, errOut, "demo", "http", "--listen", "127.0.0.1:0") }()

	m := regexp.MustCompile(`listening on (\S+) `).FindStringSubmatch(out.waitFor(t, ")\n"))
	if m == nil {
		t.Fatalf("no listening line in %q", out.String())
	}
	resp, err := http.Get("http://" + m[1] + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	host, _ := os.Hostname()
	if want := "hello from " + host + " job=hello-http\n"; string(body) != want {
		t.Errorf("GET / = %q, want %q", body, want)
	}
	out.waitFor(t, "GET / 200")
	cancel()
	if r := <-doneCh; r.code != 0 || !strings.Contains(r.stdout, "demo http: stopped") {
		t.Fatalf("demo http: %+v", r)
	}
}
