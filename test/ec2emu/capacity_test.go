package ec2emu_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

// TestSetNoCapacity: a zone out of capacity refuses every launch into it
// (the default zone when none is asked) until turned off; another zone
// launches, and its instance reports that zone.
func TestSetNoCapacity(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client(func(o *ec2.Options) { o.Retryer = aws.NopRetryer{} })
	run := func(zone string) (*ec2.RunInstancesOutput, error) {
		in := &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0")}
		if zone != "" {
			in.Placement = &types.Placement{AvailabilityZone: aws.String(zone)}
		}
		return c.RunInstances(context.Background(), in)
	}
	emu.SetNoCapacity("eu-west-2a", true)
	for _, zone := range []string{"eu-west-2a", ""} {
		_, err := run(zone)
		wantCode(t, err, ec2emu.CodeInsufficientInstanceCapacity, 500)
	}
	out, err := run("eu-west-2b")
	if err != nil {
		t.Fatalf("launch in eu-west-2b: %v", err)
	}
	if z := aws.ToString(out.Instances[0].Placement.AvailabilityZone); z != "eu-west-2b" {
		t.Fatalf("instance in %q, want eu-west-2b", z)
	}
	if rr, _ := emu.LastRunRequest(); rr.AvailabilityZone != "eu-west-2b" {
		t.Fatalf("run request zone %q", rr.AvailabilityZone)
	}
	emu.SetNoCapacity("eu-west-2a", false)
	if _, err := run("eu-west-2a"); err != nil {
		t.Fatalf("launch after capacity came back: %v", err)
	}
	if len(emu.Instances()) != 2 {
		t.Fatalf("%d instances, want 2", len(emu.Instances()))
	}
}
