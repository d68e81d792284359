package agent

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func fmtType(v any) string { return fmt.Sprintf("%T", v) }

// oneService is the services of a job the tests start: a job needs one to
// be started (the fake workers run nothing).
func oneService() []*commonpb.Service {
	return []*commonpb.Service{{Name: "svc", Command: "sleep 60"}}
}

func dial(t *testing.T, addr string) managerpb.ManagerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return managerpb.NewManagerClient(conn)
}
