package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		name    string
		url     string
		want    []string
		wantErr bool
	}{
		{name: "empty is the default", url: "", want: []string{"localhost:6790"}},
		{name: "blank is the default", url: "  ", want: []string{"localhost:6790"}},
		{name: "one", url: "m1:7000", want: []string{"m1:7000"}},
		{name: "list with spaces", url: "m1:1, m2:2 ,m3:3", want: []string{"m1:1", "m2:2", "m3:3"}},
		{name: "duplicates removed", url: "m1:1,m1:1,m2:2", want: []string{"m1:1", "m2:2"}},
		{name: "default port", url: "m1", want: []string{"m1:6790"}},
		{name: "scheme stripped", url: "grpc://m1:1,http://m2:2/", want: []string{"m1:1", "m2:2"}},
		{name: "ipv6 with port", url: "[::1]:7000", want: []string{"[::1]:7000"}},
		{name: "ipv6 without port", url: "::1", want: []string{"[::1]:6790"}},
		{name: "empty entry", url: "m1:1,,m2:2", wantErr: true},
		{name: "bad port", url: "m1:http", wantErr: true},
		{name: "port zero", url: "m1:0", wantErr: true},
		{name: "port too big", url: "m1:65536", wantErr: true},
		{name: "empty port", url: "m1:", wantErr: true},
		{name: "missing host", url: ":6790", wantErr: true},
		{name: "path", url: "m1:1/x", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.ParseURL(tc.url)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %v, want an error", tc.url, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseURL(%q) = %v, %v; want %v", tc.url, got, err, tc.want)
			}
		})
	}
}

func TestConnect_InvalidSettings(t *testing.T) {
	cases := []struct {
		name string
		s    client.Settings
	}{
		{name: "negative timeout", s: client.Settings{Timeout: -time.Second}},
		{name: "bad url", s: client.Settings{URL: "m1:1,"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := client.Connect(context.Background(), tc.s); err == nil {
				_ = m.Close()
				t.Fatal("Connect succeeded, want an error")
			}
		})
	}
}

func TestConnect_Defaults(t *testing.T) {
	m, err := client.Connect(context.Background(), client.Settings{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if got := m.Addresses(); !slices.Equal(got, []string{client.DefaultURL}) {
		t.Errorf("Addresses() = %v, want [%s]", got, client.DefaultURL)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
