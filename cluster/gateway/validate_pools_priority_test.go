package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestValidatePool_PriorityExample: examples/pools/priorities.json is a
// valid pool whose priority settings are stored as written.
func TestValidatePool_PriorityExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "pools", "priorities.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := &managerpb.Pool{}
	if err := protojson.Unmarshal(b, p); err != nil {
		t.Fatal(err)
	}
	out, err := validatePool(p)
	if err != nil {
		t.Fatalf("validatePool: %v", err)
	}
	if out.GetLowPriorityMaxWaitSeconds() != 600 || out.GetPreemptionDisabled() || out.GetHighPriorityProvisionWaitSeconds() != 0 {
		t.Fatalf("stored %v; want the example's settings", out)
	}
}
