package client_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// warningManager is the fake manager answering CreateJob and UpdateJob
// with warnings in the response header, as the gateway does for a job's
// missing security group.
type warningManager struct {
	*clienttest.Manager
	warnings []string
}

func (w warningManager) CreateJob(ctx context.Context, j *managerpb.Job) (*managerpb.JobHash, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(client.WarningHeader, w.warnings[0], client.WarningHeader, w.warnings[1]))
	return w.Manager.CreateJob(ctx, j)
}

func (w warningManager) UpdateJob(ctx context.Context, j *managerpb.Job) (*managerpb.JobHash, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(client.WarningHeader, w.warnings[0]))
	return w.Manager.UpdateJob(ctx, j)
}

// TestNorskManager_JobWarnings: CreateJobWarnings and UpdateJobWarnings
// return the norsk-warning values of the answer, in order; a manager that
// sends none gives none.
func TestNorskManager_JobWarnings(t *testing.T) {
	ws := []string{`job j1: extra_security_groups: security group "a" does not exist in region eu-west-2 (pool p, tier aws)`, "second"}
	srv := clienttest.Serve(t, warningManager{Manager: clienttest.NewManager(nil), warnings: ws}, "127.0.0.1:0")
	m := connect(t, srv.Addr)
	ctx := context.Background()
	hash, got, err := m.CreateJobWarnings(ctx, testJob("j1"))
	if err != nil || hash == 0 || !slices.Equal(got, ws) {
		t.Fatalf("CreateJobWarnings = %d, %q, %v; want the two warnings", hash, got, err)
	}
	upd := testJob("j1")
	upd.CurrentHash = hash
	if _, got, err = m.UpdateJobWarnings(ctx, upd); err != nil || !slices.Equal(got, ws[:1]) {
		t.Fatalf("UpdateJobWarnings = %q, %v", got, err)
	}
	_, _, plain := serveFake(t)
	if _, got, err = plain.CreateJobWarnings(ctx, testJob("j2")); err != nil || got != nil {
		t.Fatalf("no warnings: %q, %v", got, err)
	}
}
