package providers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

func newAWSFixture(t *testing.T, opts ec2emu.Options) (*ec2emu.Emulator, *AWS) {
	t.Helper()
	opts.LaunchTemplates = append(opts.LaunchTemplates, ec2emu.LaunchTemplate{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1})
	emu := ec2emu.Start(t, opts)
	return emu, NewAWS(AWSConfig{Base: emu.Config(), Endpoint: emu.URL(), Health: NewHealth(time.Minute, 3, nil, nil)})
}

func awsSpec(node string) LaunchSpec {
	return LaunchSpec{NodeID: node, Token: node + "-1", UserData: "#!/bin/sh\necho hi\n", AWS: &managerpb.CreateAwsNodeRequest{
		Region: ec2emu.DefaultRegion, InstanceType: "c5.large",
		Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Id{Id: "lt-0123456789abcdef0"}, Version: "1"}}}
}

func health(p Provider, loc string) managerpb.Health {
	for _, l := range p.Health().Snapshot() {
		if l.Location == loc {
			return l.Health
		}
	}
	return managerpb.Health_HEALTHY
}

func TestAWS_LaunchDescribeFindTerminate(t *testing.T) {
	emu, p := newAWSFixture(t, ec2emu.Options{SecurityGroups: []ec2emu.SecurityGroup{{ID: "sg-0aaaaaaaaaaaaaaa1", Name: "media"}}})
	ctx := context.Background()
	spec := awsSpec("n1")
	spec.AWS.ExtraSecurityGroups = []string{"media"}
	inst, err := p.Launch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	run, _ := emu.LastRunRequest()
	if len(run.SecurityGroupIDs) != 1 || run.SecurityGroupIDs[0] != "sg-0aaaaaaaaaaaaaaa1" || run.UserData != spec.UserData || run.Tags[NodeIDTag] != "n1" {
		t.Fatalf("RunInstances got groups %v, user data %q, tags %v", run.SecurityGroupIDs, run.UserData, run.Tags)
	}
	// The same create again (a retry) launches nothing new.
	again, err := p.Launch(ctx, spec)
	if err != nil || again.ID != inst.ID || len(emu.Instances()) != 1 {
		t.Fatalf("relaunch: %v %v (%d instances)", again, err, len(emu.Instances()))
	}
	if err := emu.SetState(inst.ID, ec2emu.StateRunning); err != nil {
		t.Fatal(err)
	}
	got, err := p.Describe(ctx, ec2emu.DefaultRegion, inst.ID)
	if err != nil || got.State != Running || got.Running.GetPrivateIpAddress() == "" || got.Running.GetProviderMetadata().GetAws().GetInstanceId() != inst.ID {
		t.Fatalf("Describe = %+v, %v", got, err)
	}
	found, ok, err := p.Find(ctx, ec2emu.DefaultRegion, "n1")
	if err != nil || !ok || found.ID != inst.ID {
		t.Fatalf("Find = %+v %v %v", found, ok, err)
	}
	if _, ok, _ := p.Find(ctx, ec2emu.DefaultRegion, "other"); ok {
		t.Fatal("Find found another node's instance")
	}
	if err := p.Terminate(ctx, ec2emu.DefaultRegion, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(ctx, ec2emu.DefaultRegion, inst.ID); err != nil {
		t.Fatalf("terminating a terminated instance: %v", err)
	}
	if err := p.Terminate(ctx, ec2emu.DefaultRegion, "i-0123456789abcdef0"); err != nil {
		t.Fatalf("terminating an unknown instance: %v", err)
	}
	if _, err := p.Describe(ctx, ec2emu.DefaultRegion, "i-0123456789abcdef0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Describe of an unknown instance = %v, want ErrNotFound", err)
	}
}

func TestAWS_Errors(t *testing.T) {
	ctx := context.Background()
	t.Run("throttling is retried and makes the region unstable", func(t *testing.T) {
		emu, p := newAWSFixture(t, ec2emu.Options{})
		emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeRequestLimitExceeded, 2)...)
		if _, err := p.Launch(ctx, awsSpec("n1")); err != nil {
			t.Fatal(err)
		}
		if n := emu.Calls(ec2emu.ActionRunInstances); n != 3 {
			t.Errorf("RunInstances called %d times, want 3", n)
		}
		if h := health(p, ec2emu.DefaultRegion); h != managerpb.Health_UNSTABLE {
			t.Errorf("health %s, want UNSTABLE", h)
		}
	})
	t.Run("capacity is not retried and fails the region after three", func(t *testing.T) {
		emu, p := newAWSFixture(t, ec2emu.Options{})
		emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeInsufficientInstanceCapacity, 3)...)
		for i, node := range []string{"a", "b", "c"} {
			if _, err := p.Launch(ctx, awsSpec(node)); !errors.Is(err, ErrCapacity) {
				t.Fatalf("launch %d: %v, want ErrCapacity", i, err)
			}
		}
		if n := emu.Calls(ec2emu.ActionRunInstances); n != 3 {
			t.Errorf("RunInstances called %d times, want 3 (no retries)", n)
		}
		if h := health(p, ec2emu.DefaultRegion); h != managerpb.Health_FAILED {
			t.Errorf("health %s, want FAILED", h)
		}
		// A launch that succeeds again clears FAILED (to UNSTABLE for the window).
		if _, err := p.Launch(ctx, awsSpec("d")); err != nil {
			t.Fatal(err)
		}
		if h := health(p, ec2emu.DefaultRegion); h != managerpb.Health_UNSTABLE {
			t.Errorf("health after a launch %s, want UNSTABLE", h)
		}
	})
	t.Run("an unknown security group is rejected before launching", func(t *testing.T) {
		emu, p := newAWSFixture(t, ec2emu.Options{})
		spec := awsSpec("n1")
		spec.AWS.ExtraSecurityGroups = []string{"nope"}
		if _, err := p.Launch(ctx, spec); !errors.Is(err, ErrRejected) {
			t.Fatalf("err = %v, want ErrRejected", err)
		}
		if n := emu.Calls(ec2emu.ActionRunInstances); n != 0 {
			t.Errorf("RunInstances called %d times", n)
		}
	})
	t.Run("an unknown launch template is rejected", func(t *testing.T) {
		_, p := newAWSFixture(t, ec2emu.Options{})
		spec := awsSpec("n1")
		spec.AWS.Template = &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "missing"}}
		if _, err := p.Launch(ctx, spec); !errors.Is(err, ErrRejected) {
			t.Fatalf("err = %v, want ErrRejected", err)
		}
	})
}

// TestAWS_LaunchInZone: the request's availability zone goes to
// Placement; a zone out of capacity fails with ErrCapacity and the next
// zone launches.
func TestAWS_LaunchInZone(t *testing.T) {
	emu, p := newAWSFixture(t, ec2emu.Options{})
	emu.SetNoCapacity("eu-west-2a", true)
	ctx := context.Background()
	spec := awsSpec("z1")
	spec.AWS.AvailabilityZone = "eu-west-2a"
	if _, err := p.Launch(ctx, spec); !errors.Is(err, ErrCapacity) {
		t.Fatalf("launch in a zone out of capacity: %v, want ErrCapacity", err)
	}
	spec = awsSpec("z2")
	spec.AWS.AvailabilityZone = "eu-west-2b"
	if _, err := p.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if run, _ := emu.LastRunRequest(); run.AvailabilityZone != "eu-west-2b" {
		t.Fatalf("Placement.AvailabilityZone = %q, want eu-west-2b", run.AvailabilityZone)
	}
}
