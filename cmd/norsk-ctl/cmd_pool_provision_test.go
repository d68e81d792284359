package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestCtl_PoolGetProvisioner: pool get of the example pool with an AWS
// provisioner shows it, its linger and what the engine created.
func TestCtl_PoolGetProvisioner(t *testing.T) {
	addr := startTestManager(t)
	mustRun(t, addr, "pool", "create", "-f", filepath.Join("..", "..", "examples", "pools", "elastic.json"))
	get := mustRun(t, addr, "pool", "get", "elastic")
	for _, want := range []string{"PROVISIONER", "ENGINE NODES", "aws eu-west-2a,eu-west-2b,eu-west-2c c6i.2xlarge(8u),c6i.4xlarge(16u)",
		"10m0s", "0 running, 0 creating", "Product templates the tiers' new nodes offer:", "hello (1.0, 1.1)"} {
		if !strings.Contains(get, want) {
			t.Errorf("pool get lacks %q:\n%s", want, get)
		}
	}
	if strings.Contains(get, "backed off") {
		t.Errorf("pool get shows backoffs that do not exist:\n%s", get)
	}
}

// TestWritePoolDetails_Backoffs: the offerings backed off are listed with
// their tier, until when and why.
func TestWritePoolDetails_Backoffs(t *testing.T) {
	until := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	p := &managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{{Name: "aws", LingerSeconds: 300, Provisioner: &managerpb.PoolTier_Mock{
		Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 4}}}}},
		TierStatus: []*managerpb.PoolTierStatus{{Tier: "aws", NodesRunning: 2, NodesCreating: 1, BackedOff: []*managerpb.OfferingBackoff{
			{Offering: "c6i.large@eu-west-2a", Until: timestamppb.New(until), Reason: "1 capacity failure(s) in the last hour"}}}}}
	var b bytes.Buffer
	if err := writePoolDetails(&b, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mock 4u", "5m0s", "2 running, 1 creating", "Offerings backed off after capacity errors:",
		"c6i.large@eu-west-2a", "2026-12-01T20:00:00Z", "1 capacity failure(s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
