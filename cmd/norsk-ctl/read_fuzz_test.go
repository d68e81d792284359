package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// FuzzCtlReadProtoFile feeds arbitrary bytes as the --file of "job
// create", "bundle create" and "pool create" (read from standard input,
// "-f -"). It must never panic; a refusal is a usage error (exit code 2)
// naming --file and the message type; a message accepted survives a
// protojson round trip unchanged (what norsk-ctl sends is what the file
// said).
func FuzzCtlReadProtoFile(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for kind := range byte(3) {
			f.Add(kind, data)
		}
	}
	f.Add(byte(0), []byte(`{"jobId": {"jobId": "j"}, "tags": {"a": "b"}, "startDateTime": "2026-01-01T00:00:00Z"}`))
	f.Add(byte(1), []byte(`{"bundleId": {"bundleId": "b"}, "jobs": [{"jobName": "x", "job": {"services": [{"name": "s"}]}}]}`))
	f.Add(byte(2), []byte(`{"name": "p", "tiers": [{"name": "t", "nodeSelector": {"k": "v"}}], "restartCeiling": {"maxFailures": 1}}`))
	f.Add(byte(0), []byte(`{"jobId": {"jobId": "\ud800"}}`))
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		cmd := &cobra.Command{}
		cmd.SetIn(bytes.NewReader(data))
		var m proto.Message
		var err error
		switch kind % 3 {
		case 0:
			m, err = ctlReadJobFile(cmd, "-")
		case 1:
			m, err = ctlReadBundleFile(cmd, "-")
		default:
			m, err = ctlReadPoolFile(cmd, "-")
		}
		if err != nil {
			var ue *ctlUsageError
			if !errors.As(err, &ue) {
				t.Fatalf("refusal %v (%T) is not a usage error", err, err)
			}
			if !strings.Contains(err.Error(), "--file") {
				t.Fatalf("refusal %q does not name --file", err)
			}
			return
		}
		out, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("an accepted %T does not encode: %v", m, err)
		}
		again := m.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(out, again); err != nil {
			t.Fatalf("an accepted %T does not decode after encoding: %v\n%s", m, err, out)
		}
		if !proto.Equal(m, again) {
			t.Fatalf("protojson round trip changed the %T:\n%v\n%v", m, m, again)
		}
	})
}
