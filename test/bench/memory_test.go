package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseProcMem(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         procMem
		wantErr      string
	}{
		{name: "both", status: "Name:\tnorsk-manager\nVmPeak:\t 999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t9\n",
			want: procMem{peak: 2 << 20, now: 1 << 20}},
		{name: "no VmHWM", status: "VmRSS:\t  1024 kB\n", wantErr: "no VmHWM and VmRSS"},
		{name: "not kB", status: "VmHWM:\t2 MB\nVmRSS:\t1 kB\n", wantErr: "VmHWM"},
		{name: "kernel thread", status: "Name:\tkthreadd\n", wantErr: "no VmHWM and VmRSS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcMem("/proc/1/status", tc.status)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
