package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// warnFake answers CreateJob with a warning, as the gateway does for a
// job's security group missing in an AWS tier's region.
type warnFake struct{ *clienttest.Manager }

const ctlTestWarning = `job w1: extra_security_groups: security group "typo" does not exist in region eu-west-2 (pool cloud, tier aws)`

func (f warnFake) CreateJob(ctx context.Context, j *managerpb.Job) (*managerpb.JobHash, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(client.WarningHeader, ctlTestWarning))
	return f.Manager.CreateJob(ctx, j)
}

// TestCtl_JobCreateWarnings: "job create" prints the manager's warnings
// on standard error and still succeeds, its standard output unchanged.
func TestCtl_JobCreateWarnings(t *testing.T) {
	addr := clienttest.Serve(t, warnFake{clienttest.NewManager(func() time.Time { return ctlTestNow })}, "127.0.0.1:0").Addr
	r := runCtl(t, testCtx(), `{"jobId": {"jobId": "w1"}}`, "--manager-url", addr, "job", "create", "-f", "-")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "created job w1 (hash ") || r.stderr != "warning: "+ctlTestWarning+"\n" {
		t.Fatalf("job create: %+v", r)
	}
}
