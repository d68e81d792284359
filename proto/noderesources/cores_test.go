package noderesources

import (
	"slices"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

func TestParseCPUList(t *testing.T) {
	cases := []struct {
		in   string
		want []uint32 // nil: an error
	}{
		{"0", []uint32{0}},
		{"2-7", []uint32{2, 3, 4, 5, 6, 7}},
		{"0-1, 4 ,6-7", []uint32{0, 1, 4, 6, 7}},
		{"3,1,1-2", []uint32{1, 2, 3}},
		{"8191", []uint32{8191}},
		{"", nil},
		{" ", nil},
		{"a", nil},
		{"1-", nil},
		{"-1", nil},
		{"5-3", nil},
		{"8192", nil},
		{"1,,2", nil},
		{"0x1", nil},
	}
	for _, tc := range cases {
		got, err := ParseCPUList(tc.in)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("ParseCPUList(%q) = %v; want an error", tc.in, got)
		case tc.want != nil && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatCPUList(t *testing.T) {
	ids := []uint32{0, 1, 2, 3, 8, 10, 11}
	if got := FormatCPUList(ids); got != "0,1,2,3,8,10,11" {
		t.Errorf("FormatCPUList = %q", got)
	}
	if got := FormatCPURanges(ids); got != "0-3,8,10-11" {
		t.Errorf("FormatCPURanges = %q", got)
	}
	if got := FormatCPURanges(nil); got != "" {
		t.Errorf("FormatCPURanges(nil) = %q", got)
	}
	back, err := ParseCPUList(FormatCPURanges(ids))
	if err != nil || !slices.Equal(back, ids) {
		t.Errorf("round trip = %v, %v", back, err)
	}
}

func TestNormalizeArchitecture(t *testing.T) {
	for in, want := range map[string]string{"x86_64": ArchX86_64, "AMD64": ArchX86_64, " x86-64 ": ArchX86_64,
		"arm64": ArchAarch64, "aarch64": ArchAarch64, "": "", "RISCV64": "riscv64"} {
		if got := NormalizeArchitecture(in); got != want {
			t.Errorf("NormalizeArchitecture(%q) = %q; want %q", in, got, want)
		}
	}
	for a, want := range map[commonpb.Architecture]string{commonpb.Architecture_X86_64: ArchX86_64, commonpb.Architecture_AARCH_64: ArchAarch64, 7: ""} {
		if got := ArchitectureName(a); got != want {
			t.Errorf("ArchitectureName(%v) = %q; want %q", a, got, want)
		}
	}
}
