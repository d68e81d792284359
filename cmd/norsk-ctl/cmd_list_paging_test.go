package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestCtl_ListsReadEveryPage: slot list, node list and node get show every
// entry of a manager that answers its listings in pages of two (issue 21
// §3), through the client's paging.
func TestCtl_ListsReadEveryPage(t *testing.T) {
	fake, addr := newTestFake(t)
	fake.SetPageSize(2)
	for i := range 5 {
		mustRun(t, addr, "slot", "register", fmt.Sprintf("rack-%d", i))
		if _, err := fake.CreateMockNode(context.Background(), &managerpb.CreateMockNodeRequest{
			NodeId: &commonpb.NodeId{NodeId: fmt.Sprintf("mock-%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{{[]string{"slot", "list"}, "rack-%d "}, {[]string{"node", "list"}, "mock-%d "}} {
		got := mustRun(t, addr, tc.args...)
		for i := range 5 {
			if !strings.Contains(got, fmt.Sprintf(tc.want, i)) {
				t.Errorf("%s lacks %s:\n%s", strings.Join(tc.args, " "), fmt.Sprintf(tc.want, i), got)
			}
		}
		if n := strings.Count(strings.TrimSpace(got), "\n"); n != 5 {
			t.Errorf("%s printed %d rows, want 5 (and a header):\n%s", strings.Join(tc.args, " "), n, got)
		}
	}
	mustRun(t, addr, "node", "get", "mock-4")
}
