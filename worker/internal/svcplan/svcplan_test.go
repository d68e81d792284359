package svcplan

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

type item struct {
	name string
	deps []string
}

func TestStartOrder(t *testing.T) {
	tests := []struct {
		name    string
		items   []item
		want    string
		wantErr string
	}{
		{"given order when independent", []item{{"a", nil}, {"b", nil}, {"c", nil}}, "a,b,c", ""},
		{"dependencies first", []item{{"web", []string{"db"}}, {"db", nil}}, "db,web", ""},
		{"stable among ready", []item{{"c", []string{"a"}}, {"b", nil}, {"a", nil}}, "b,a,c", ""},
		{"diamond", []item{{"d", []string{"b", "c"}}, {"c", []string{"a"}}, {"b", []string{"a"}}, {"a", nil}}, "a,c,b,d", ""},
		{"cycle named", []item{{"x", nil}, {"a", []string{"b"}}, {"b", []string{"a"}}}, "", `"a", "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := StartOrder(tt.items, func(i item) string { return i.name }, func(i item) []string { return i.deps })
			if tt.wantErr != "" {
				if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidJob naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, it := range got {
				names = append(names, it.name)
			}
			if s := strings.Join(names, ","); s != tt.want {
				t.Fatalf("order = %s, want %s", s, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	now := time.Now()
	recent := []time.Time{now.Add(-time.Second), now.Add(-2 * time.Second)}
	old := []time.Time{now.Add(-2 * time.Minute), now.Add(-3 * time.Minute)}
	tests := []struct {
		name     string
		policy   commonpb.Service_ServiceRestart
		success  bool
		restarts []time.Time
		count    uint32
		want     Action
	}{
		{"never success completes", commonpb.Service_NEVER, true, nil, 3, Complete},
		{"never failure fails", commonpb.Service_NEVER, false, nil, 3, Fail},
		{"on failure success completes", commonpb.Service_ON_FAILURE, true, nil, 3, Complete},
		{"on failure failure restarts", commonpb.Service_ON_FAILURE, false, recent, 3, Restart},
		{"on failure budget spent fails", commonpb.Service_ON_FAILURE, false, recent, 2, Fail},
		{"old restarts do not count", commonpb.Service_ON_FAILURE, false, old, 2, Restart},
		{"always success restarts", commonpb.Service_ALWAYS, true, nil, 1, Restart},
		{"always budget spent fails", commonpb.Service_ALWAYS, true, recent[:1], 1, Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := append([]time.Time(nil), tt.restarts...)
			if got := Decide(tt.policy, tt.success, rs, tt.count, time.Minute, now); got != tt.want {
				t.Fatalf("Decide = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBackoffAndDefaults(t *testing.T) {
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		if got := Backoff(100, 1000, n); got != want {
			t.Errorf("Backoff(n=%d) = %d, want %d", n, got, want)
		}
	}
	c, p := EffectiveRestart(&commonpb.Service{})
	if c != DefaultRestartCount || p != DefaultRestartPeriod {
		t.Errorf("defaults = %d, %s", c, p)
	}
	c, p = EffectiveRestart(&commonpb.Service{RestartCount: 5, RestartPeriod: 7})
	if c != 5 || p != 7*time.Second {
		t.Errorf("explicit = %d, %s", c, p)
	}
	if got := strings.Join(MergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"}), " "); got != "A=1 B=3 C=4" {
		t.Errorf("MergeEnv = %s", got)
	}
}
