package roles

import "testing"

func TestLogicalRole(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"primary", "primary"},
		{"primary~3", "primary"},
		{"backup~1~2", "backup"},
		{"~1", ""},
		{"", ""},
	} {
		if got := LogicalRole(tc.in); got != tc.want {
			t.Errorf("LogicalRole(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTargetRole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    uint32
		want string
	}{
		{"primary", 1, "primary~1"},
		{"primary~1", 2, "primary~2"},
		{"backup~7", 8, "backup~8"},
	} {
		if got := TargetRole(tc.in, tc.n); got != tc.want {
			t.Errorf("TargetRole(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if !IsMoved(tc.want) || IsMoved(LogicalRole(tc.want)) {
			t.Errorf("IsMoved wrong for %q", tc.want)
		}
	}
}
