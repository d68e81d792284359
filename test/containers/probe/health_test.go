package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestHandlerAt_HealthyAfter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		healthyAt time.Time
		want      int
	}{
		{"not yet", time.Now().Add(time.Hour), http.StatusServiceUnavailable},
		{"healthy", time.Now().Add(-time.Second), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handlerAt(tc.healthyAt).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
			if rec.Code != tc.want {
				t.Errorf("/healthz = %d, want %d", rec.Code, tc.want)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	ok := httptest.NewServer(handlerAt(time.Time{}))
	defer ok.Close()
	notYet := httptest.NewServer(handlerAt(time.Now().Add(time.Hour)))
	defer notYet.Close()
	for _, tc := range []struct {
		url  string
		want int
	}{
		{ok.URL + "/healthz", 0},
		{notYet.URL + "/healthz", 1},
		{ok.URL + "/nope", 1},
		{"http://127.0.0.1:1/healthz", 1}, // nothing listens
	} {
		if got := health(tc.url); got != tc.want {
			t.Errorf("health(%s) = %d, want %d", tc.url, got, tc.want)
		}
	}
}

func TestHandler_Resolve(t *testing.T) {
	rec := httptest.NewRecorder()
	handler().ServeHTTP(rec, httptest.NewRequest("GET", "/resolve?host=127.0.0.1", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "127.0.0.1\n" {
		t.Errorf("/resolve = %d %q", rec.Code, rec.Body.String())
	}
}
