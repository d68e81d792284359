package providers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

// fakeClock is a settable clock for the look-up cache.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newGroupsFixture(t *testing.T) (*ec2emu.Emulator, *AWS, *fakeClock) {
	t.Helper()
	emu := ec2emu.Start(t, ec2emu.Options{
		SecurityGroups:  []ec2emu.SecurityGroup{{ID: "sg-0aaaaaaaaaaaaaaa1", Name: "media"}, {ID: "sg-0aaaaaaaaaaaaaaa2", Name: "srt"}},
		LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	clk := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	return emu, NewAWS(AWSConfig{Base: emu.Config(), Endpoint: emu.URL(), Clock: clk.now}), clk
}

// TestAWS_MissingSecurityGroups: the look-up names the missing groups,
// and its answers are cached per region: a group found for
// DefaultSecurityGroupTTL, a missing one for DefaultSecurityGroupMissingTTL,
// so a group created meanwhile is seen after the shorter one.
func TestAWS_MissingSecurityGroups(t *testing.T) {
	emu, p, clk := newGroupsFixture(t)
	ctx := context.Background()
	region := ec2emu.DefaultRegion
	missing, err := p.MissingSecurityGroups(ctx, region, []string{"media", "typo", "srt"})
	if err != nil || !slices.Equal(missing, []string{"typo"}) {
		t.Fatalf("missing = %q, %v; want [typo]", missing, err)
	}
	calls := emu.Calls(ec2emu.ActionDescribeSecurityGroups)
	// A launch right after costs no second look-up.
	spec := awsSpec("n1")
	spec.AWS.ExtraSecurityGroups = []string{"media", "srt"}
	if _, err := p.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := emu.Calls(ec2emu.ActionDescribeSecurityGroups); n != calls {
		t.Fatalf("DescribeSecurityGroups called %d more times; want 0 (cached)", n-calls)
	}
	emu.AddSecurityGroup(ec2emu.SecurityGroup{Name: "typo"})
	if missing, _ := p.MissingSecurityGroups(ctx, region, []string{"typo"}); !slices.Equal(missing, []string{"typo"}) {
		t.Fatalf("within the missing TTL: missing = %q; want the cached answer", missing)
	}
	clk.add(DefaultSecurityGroupMissingTTL)
	if missing, err := p.MissingSecurityGroups(ctx, region, []string{"typo", "media"}); err != nil || missing != nil {
		t.Fatalf("after the missing TTL: missing = %q, %v; want none", missing, err)
	}
	// The found answer for media was still fresh: only typo was asked for.
	if n := emu.Calls(ec2emu.ActionDescribeSecurityGroups); n != calls+1 {
		t.Fatalf("DescribeSecurityGroups called %d more times; want 1", n-calls)
	}
}

// TestAWS_LaunchGroupMissing: a launch naming a group that does not exist
// fails before RunInstances with ErrSecurityGroupNotFound naming the group
// and the region; a group deleted after it was looked up (RunInstances
// answers InvalidGroup.NotFound) is the same error, naming that group, and
// the cached ids are forgotten. The error text is what the provisioner
// reads back from the node record.
func TestAWS_LaunchGroupMissing(t *testing.T) {
	emu, p, _ := newGroupsFixture(t)
	ctx := context.Background()
	region := ec2emu.DefaultRegion

	spec := awsSpec("n1")
	spec.AWS.ExtraSecurityGroups = []string{"media", "typo"}
	_, err := p.Launch(ctx, spec)
	var me *SecurityGroupsMissingError
	if !errors.Is(err, ErrSecurityGroupNotFound) || !errors.Is(err, ErrRejected) || !errors.As(err, &me) ||
		!slices.Equal(me.Groups, []string{"typo"}) || me.Region != region {
		t.Fatalf("err = %v; want ErrSecurityGroupNotFound for typo in %s", err, region)
	}
	if n := emu.Calls(ec2emu.ActionRunInstances); n != 0 {
		t.Fatalf("RunInstances called %d times; want 0", n)
	}
	if r, gs, ok := provisioner.MissingGroupsOf(err.Error()); !ok || r != region || !slices.Equal(gs, []string{"typo"}) {
		t.Fatalf("provisioner.MissingGroupsOf(%q) = %q %q %v", err.Error(), r, gs, ok)
	}

	// Deleted between the look-up and the launch.
	spec = awsSpec("n2")
	spec.AWS.ExtraSecurityGroups = []string{"srt", "media"}
	if missing, err := p.MissingSecurityGroups(ctx, region, spec.AWS.ExtraSecurityGroups); err != nil || missing != nil {
		t.Fatalf("missing = %q, %v", missing, err)
	}
	emu.RemoveSecurityGroup("srt")
	_, err = p.Launch(ctx, spec)
	if !errors.As(err, &me) || !slices.Equal(me.Groups, []string{"srt"}) || me.Cause == nil {
		t.Fatalf("err = %v; want a SecurityGroupsMissingError naming srt with EC2's error", err)
	}
	if r, gs, ok := provisioner.MissingGroupsOf(err.Error()); !ok || r != region || !slices.Equal(gs, []string{"srt"}) {
		t.Fatalf("provisioner.MissingGroupsOf(%q) = %q %q %v", err.Error(), r, gs, ok)
	}
	if errors.Is(err, ErrCapacity) {
		t.Fatal("a missing group is not a capacity error")
	}
	// The cache forgot: the next look-up asks EC2 and finds it missing.
	if missing, err := p.MissingSecurityGroups(ctx, region, []string{"srt", "media"}); err != nil || !slices.Equal(missing, []string{"srt"}) {
		t.Fatalf("after the failed launch: missing = %q, %v; want [srt]", missing, err)
	}
}
