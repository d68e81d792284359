package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// TestWorkerResourceFlags parses the capacity, GPU, capability, zone,
// cores, shape and subnet flags as the worker does (allowed to run on
// CPUs 0-7) and checks the resources it would report (the cores 0-7 and
// this binary's architecture unless said otherwise), or that the error
// names the flag.
func TestWorkerResourceFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    *commonpb.NodeResources
		wantErr string
	}{
		{"defaults: half the cores", nil, &commonpb.NodeResources{Capacity: 4}, ""},
		{"everything", []string{"--capacity=3.5", "--gpu-capacity", "2", "--gpu-model=nvidia-l4",
			"--capability", "nvenc=true", "--capability=av1=hw", "--zone=z1"},
			&commonpb.NodeResources{Capacity: 3.5, GpuCapacity: 2, GpuModel: "nvidia-l4",
				Capabilities: map[string]string{"nvenc": "true", "av1": "hw"}, Zone: "z1"}, ""},
		{"capability value with =", []string{"--capability=codec=h264=main"},
			&commonpb.NodeResources{Capacity: 4, Capabilities: map[string]string{"codec": "h264=main"}}, ""},
		{"not a number", []string{"--capacity=lots"}, nil, `invalid argument "lots" for "--capacity" flag: want a number of reference units`},
		{"zero capacity", []string{"--capacity=0"}, nil, "--capacity 0 reference units: must be greater than 0"},
		{"negative capacity", []string{"--capacity=-2"}, nil, "--capacity -2 reference units: must be greater than 0"},
		{"NaN capacity", []string{"--capacity=NaN"}, nil, "--capacity NaN is not a number of reference units"},
		{"negative gpu", []string{"--gpu-capacity=-1"}, nil, "--gpu-capacity -1 reference units: must be 0 or more"},
		{"gpu model with space", []string{"--gpu-model=nvidia l4"}, nil, "--gpu-model \"nvidia l4\" must be printable characters without spaces"},
		{"capability without value", []string{"--capability=nvenc"}, nil, `--capability "nvenc": want NAME=VALUE`},
		{"capability empty name", []string{"--capability==x"}, nil, `--capability "=x": want NAME=VALUE`},
		{"capability twice", []string{"--capability=a=1", "--capability=a=2"}, nil, `--capability "a=2": a is given twice`},
		{"capability value control character", []string{"--capability=a=x\x01"}, nil, "--capability a: value"},
		{"zone with space", []string{"--zone=rack 1"}, nil, "--zone \"rack 1\" must be printable characters without spaces"},
		{"cores kept for the host", []string{"--cores=2-5, 7", "--shape=bare-metal-32", "--subnet=lan-2"},
			&commonpb.NodeResources{Capacity: 2.5, Cores: []uint32{2, 3, 4, 5, 7}, Shape: "bare-metal-32", Subnet: "lan-2"}, ""},
		{"cores and capacity", []string{"--cores=0", "--capacity=3"}, &commonpb.NodeResources{Capacity: 3, Cores: []uint32{0}}, ""},
		{"core not allowed", []string{"--cores=6-9"}, nil, `--cores "6-9": cpu 8 is not one this worker may run on (its affinity mask allows 0-7)`},
		{"cores not a list", []string{"--cores=two"}, nil, `--cores "two": "two" is not a cpu id or range`},
		{"cores backwards", []string{"--cores=5-3"}, nil, `--cores "5-3": range "5-3" runs backwards`},
		// An empty --cores (say --cores=$CORES with CORES unset) is refused, not read as "every CPU".
		{"cores empty", []string{"--cores="}, nil, `--cores "": empty cpu list`},
		{"cores blank", []string{"--cores= "}, nil, `--cores " ": empty cpu list`},
		{"shape with space", []string{"--shape=VM Standard"}, nil, `--shape "VM Standard" must be printable characters without spaces`},
	}
	arch, archKnown := noderesources.HostArchitecture()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r resourceFlags
			cmd := &cobra.Command{Use: "x"}
			addResourceFlags(cmd, &r)
			err := cmd.ParseFlags(tc.args)
			var got *commonpb.NodeResources
			if err == nil {
				got, err = r.resources([]uint32{0, 1, 2, 3, 4, 5, 6, 7})
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.Cores == nil {
				tc.want.Cores = []uint32{0, 1, 2, 3, 4, 5, 6, 7}
			}
			if archKnown {
				tc.want.Architecture = &arch
			}
			if !proto.Equal(got, tc.want) {
				t.Fatalf("resources = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCtl_Worker_BadCapacity: a bad resource flag is a usage error (exit
// 2) naming the flag, before the worker listens.
func TestCtl_Worker_BadCapacity(t *testing.T) {
	for _, args := range [][]string{{"--capacity=0"}, {"--capacity=x"}, {"--capability=nvenc"}, {"--cores=99999"}} {
		r := runCtl(t, testCtx(), "", append([]string{"--mode=worker", "--listen=127.0.0.1:0",
			"--state-dir=" + filepath.Join(t.TempDir(), "w")}, args...)...)
		flag, _, _ := strings.Cut(args[0], "=")
		if r.code != ctlExitUsage || !strings.Contains(r.stderr, flag) || strings.Contains(r.stderr, "worker listening") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s", args, r.code, r.stderr, ctlExitUsage, flag)
		}
	}
}
