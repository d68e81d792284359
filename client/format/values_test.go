package format_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/format"
)

func TestTags(t *testing.T) {
	cases := []struct {
		name string
		tags map[string]string
		want string
	}{
		{"nil", nil, "-"},
		{"empty", map[string]string{}, "-"},
		{"key order", map[string]string{"b": "2", "a": "1", "c": "3"}, "a=1,b=2,c=3"},
		{"empty value", map[string]string{"k": ""}, "k="},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Tags(tc.tags); got != tc.want {
				t.Errorf("Tags(%v) = %q, want %q", tc.tags, got, tc.want)
			}
		})
	}
}

func TestTime(t *testing.T) {
	cases := []struct {
		name string
		ts   *timestamppb.Timestamp
		want string
	}{
		{"nil", nil, "-"},
		{"utc", timestamppb.New(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)), "2026-05-04T12:00:00Z"},
		{"other zone in utc, whole seconds", timestamppb.New(time.Date(2026, 5, 4, 12, 0, 1, 500, time.FixedZone("CET", 3600))), "2026-05-04T11:00:01Z"},
		{"unset", &timestamppb.Timestamp{}, "1970-01-01T00:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Time(tc.ts); got != tc.want {
				t.Errorf("Time = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
	cases := []struct {
		name string
		ts   *timestamppb.Timestamp
		want string
	}{
		{"nil", nil, "never"},
		{"unset", &timestamppb.Timestamp{}, "never"},
		{"go zero time", timestamppb.New(time.Time{}), "never"},
		{"future", ago(-time.Second), "just now"},
		{"now", ago(0), "0s ago"},
		{"seconds truncated", ago(12*time.Second + 900*time.Millisecond), "12s ago"},
		{"one minute", ago(time.Minute), "1m ago"},
		{"minutes truncated", ago(90 * time.Second), "1m ago"},
		{"under an hour", ago(59*time.Minute + 59*time.Second), "59m ago"},
		{"one hour", ago(time.Hour), "1h ago"},
		{"under two days", ago(47*time.Hour + 59*time.Minute), "47h ago"},
		{"two days", ago(48 * time.Hour), "2d ago"},
		{"days truncated", ago(100 * time.Hour), "4d ago"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Age(now, tc.ts); got != tc.want {
				t.Errorf("Age = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnum(t *testing.T) {
	cases := []struct {
		name, value, prefix, want string
	}{
		{"prefix removed", "NODE_LIFECYCLE_STARTED", "NODE_LIFECYCLE_", "started"},
		{"no prefix", "HEALTH_PING_TIME_EXCEEDED", "", "health_ping_time_exceeded"},
		{"other prefix kept", "ON_FAILURE", "JOB_", "on_failure"},
		{"empty", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.Enum(tc.value, tc.prefix); got != tc.want {
				t.Errorf("Enum(%q, %q) = %q, want %q", tc.value, tc.prefix, got, tc.want)
			}
		})
	}
}

// TestValue: a value that would split a key=value line is quoted.
func TestValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"primary", "primary"},
		{"job-1.a_b", "job-1.a_b"},
		{"ünïcode", "ünïcode"},
		{"my role", `"my role"`},
		{"a=b", `"a=b"`},
		{`say "hi"`, `"say \"hi\""`},
		{"tab\there", `"tab\there"`},
		{"", `""`},
		{"a\u200bb", `"a\u200bb"`},
	} {
		if got := format.Value(tc.in); got != tc.want {
			t.Errorf("Value(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
