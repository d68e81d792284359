package agent

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func fmtType(v any) string { return fmt.Sprintf("%T", v) }

func dial(t *testing.T, addr string) managerpb.ManagerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return managerpb.NewManagerClient(conn)
}
