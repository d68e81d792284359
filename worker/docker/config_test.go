package docker

import (
	"strings"
	"testing"
	"time"
)

func TestParseMediaImages(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr string
	}{
		{nil, map[string]string{}, ""},
		{[]string{"recommended=example/media:1.0, LTS=example/media:0.9"}, map[string]string{"RECOMMENDED": "example/media:1.0", "LTS": "example/media:0.9"}, ""},
		{[]string{"LATEST=a/b:1", "LATEST=a/b:1"}, map[string]string{"LATEST": "a/b:1"}, ""},
		{[]string{"LATEST=a/b:1", "LATEST=a/b:2"}, nil, "given twice"},
		{[]string{"NEWEST=a/b:1"}, nil, `version "NEWEST" is not one of RECOMMENDED, LATEST, PREVIOUS_RECOMMENDED, LTS`},
		{[]string{"LATEST"}, nil, "want VERSION=IMAGE"},
		{[]string{"LATEST=Not An Image"}, nil, "is not an image reference"},
	}
	for _, tt := range tests {
		got, err := ParseMediaImages(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseMediaImages(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("ParseMediaImages(%q) = %v, %v", tt.in, got, err)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseMediaImages(%q)[%s] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.StateDir = "" }, "StateDir"},
		{func(c *Config) { c.Network = "bridge" }, "Network"},
		{func(c *Config) { c.DefaultHostAddress = "localhost" }, "DefaultHostAddress"},
		{func(c *Config) { c.PullTimeout = 0 }, "PullTimeout"},
		{func(c *Config) { c.RestartBackoff = time.Second; c.MaxRestartBackoff = 0 }, "RestartBackoff"},
		{func(c *Config) { c.MediaImages = map[string]string{"LTS": "::"} }, "MediaImages[LTS]"},
		{func(c *Config) { c.EngineCheckInterval = 0 }, "EngineCheckInterval"},
		{func(c *Config) { c.EnginePingTimeout = 0 }, "EnginePingTimeout"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.StateDir = "x"
		tt.mutate(&c)
		err := c.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate() = %v, want %q", err, tt.want)
		}
	}
}

func TestExitStateString(t *testing.T) {
	tests := []struct {
		st   exitState
		want string
		ok   bool
	}{
		{exitState{Code: 0}, "exited with code 0", true},
		{exitState{Code: 3}, "exited with code 3", false},
		{exitState{Code: 143}, "exited with code 143 (killed by SIGTERM)", false},
		{exitState{Code: 137, OOM: true}, "was killed for running out of memory (OOM), exit code 137", false},
		{exitState{Code: 127, Error: "exec failed"}, "exited with code 127; engine error: exec failed", false},
		{exitState{Gone: true}, "container removed", false},
	}
	for _, tt := range tests {
		if got := tt.st.String(); got != tt.want || tt.st.success() != tt.ok {
			t.Errorf("%+v: %q success=%v, want %q success=%v", tt.st, got, tt.st.success(), tt.want, tt.ok)
		}
	}
}

func TestReadPull(t *testing.T) {
	stream := `{"status":"Pulling from x","id":"v1"}
{"status":"Pulling fs layer","progressDetail":{},"id":"a"}
{"status":"Downloading","progressDetail":{"current":500000,"total":1000000},"id":"a"}
{"status":"Already exists","progressDetail":{},"id":"b"}
{"status":"Downloading","progressDetail":{"current":1000000,"total":1000000},"id":"a"}
{"status":"Pull complete","progressDetail":{},"id":"a"}
`
	var got []string
	if err := readPull(strings.NewReader(stream), 0, func(p pullProgress) { got = append(got, p.String()) }); err != nil {
		t.Fatal(err)
	}
	if last := got[len(got)-1]; last != "2 of 2 layers done, 1.0 of 1.0 MB" {
		t.Errorf("last progress %q (all: %q)", last, got)
	}
	err := readPull(strings.NewReader(`{"status":"Downloading","progressDetail":{"current":1},"id":"a"}
{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}
`), time.Hour, func(pullProgress) {})
	if err == nil || err.Error() != "manifest unknown" {
		t.Errorf("stream error = %v", err)
	}
}
