package ec2emu_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// noBackoff keeps the standard retryer (its retryables, attempts and retry
// quota) but without sleeping between attempts, so tests stay fast.
func noBackoff(o *ec2.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})
}

func maxAttempts(n int) func(*ec2.Options) {
	return func(o *ec2.Options) { o.RetryMaxAttempts = n }
}

// apiCode returns the smithy API error code, HTTP status and message of err.
func apiCode(t *testing.T, err error) (string, int, string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an API error, got nil")
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not a smithy.APIError", err, err)
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
		if re.ServiceRequestID() == "" {
			t.Errorf("no request id in %v", err)
		}
	}
	return ae.ErrorCode(), status, ae.ErrorMessage()
}

func wantCode(t *testing.T, err error, code string, status int) {
	t.Helper()
	got, gotStatus, msg := apiCode(t, err)
	if got != code || gotStatus != status {
		t.Fatalf("error = %s (HTTP %d, %q), want %s (HTTP %d)", got, gotStatus, msg, code, status)
	}
}

func tagSpec(kv ...string) []types.TagSpecification {
	var tags []types.Tag
	for i := 0; i < len(kv); i += 2 {
		tags = append(tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}
}

func run(t *testing.T, c *ec2.Client, in *ec2.RunInstancesInput) *ec2.RunInstancesOutput {
	t.Helper()
	if in.MinCount == nil {
		in.MinCount, in.MaxCount = aws.Int32(1), aws.Int32(1)
	}
	if in.ImageId == nil && in.LaunchTemplate == nil {
		in.ImageId = aws.String("ami-0123456789abcdef0")
	}
	out, err := c.RunInstances(context.Background(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	return out
}

func describe(t *testing.T, c *ec2.Client, in *ec2.DescribeInstancesInput) []types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), in)
	if err != nil {
		t.Fatalf("DescribeInstances: %v", err)
	}
	var ins []types.Instance
	for _, r := range out.Reservations {
		ins = append(ins, r.Instances...)
	}
	return ins
}

func tagsOf(in types.Instance) map[string]string {
	m := map[string]string{}
	for _, t := range in.Tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func TestHappyPath(t *testing.T) {
	clk := newClock()
	emu := ec2emu.Start(t, ec2emu.Options{
		PendingFor:       30 * time.Second,
		ShuttingDownFor:  10 * time.Second,
		PublicIPTemplate: "127.0.1.%d",
		Now:              clk.Now,
	})
	sg := emu.AddSecurityGroup(ec2emu.SecurityGroup{Name: "norsk-workers"})
	lt := emu.AddLaunchTemplate(ec2emu.LaunchTemplate{Name: "norsk-worker", ImageID: "ami-0123456789abcdef0", InstanceType: "c7i.large", Versions: 3})
	c := emu.Client()
	ctx := context.Background()

	userData := "#!/bin/sh\nNORSK_TOKEN=secret-token\n"
	out := run(t, c, &ec2.RunInstancesInput{
		LaunchTemplate:    &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("norsk-worker"), Version: aws.String("2")},
		InstanceType:      types.InstanceTypeC7iXlarge,
		MinCount:          aws.Int32(1),
		MaxCount:          aws.Int32(1),
		UserData:          aws.String(base64.StdEncoding.EncodeToString([]byte(userData))),
		SecurityGroupIds:  []string{sg.ID},
		SubnetId:          aws.String("subnet-0aaaaaaaaaaaaaaa1"),
		TagSpecifications: tagSpec("norsk:cluster", "c1", "Name", "worker-1"),
		ClientToken:       aws.String("token-1"),
	})
	if len(out.Instances) != 1 {
		t.Fatalf("RunInstances returned %d instances", len(out.Instances))
	}
	inst := out.Instances[0]
	id := aws.ToString(inst.InstanceId)
	if !strings.HasPrefix(id, "i-") || inst.State.Name != types.InstanceStateNamePending || aws.ToInt32(inst.State.Code) != 0 {
		t.Fatalf("RunInstances instance = %s %v", id, inst.State)
	}
	if inst.InstanceType != types.InstanceTypeC7iXlarge || aws.ToString(inst.PrivateIpAddress) != "127.0.0.10" ||
		inst.PublicIpAddress != nil || aws.ToString(inst.SubnetId) != "subnet-0aaaaaaaaaaaaaaa1" ||
		aws.ToString(inst.ClientToken) != "token-1" || tagsOf(inst)["norsk:cluster"] != "c1" {
		t.Fatalf("RunInstances instance fields: %+v", inst)
	}
	if len(inst.SecurityGroups) != 1 || aws.ToString(inst.SecurityGroups[0].GroupName) != "norsk-workers" {
		t.Fatalf("security groups = %+v", inst.SecurityGroups)
	}
	if aws.ToString(out.ReservationId) == "" || aws.ToString(out.OwnerId) != ec2emu.DefaultOwnerID {
		t.Fatalf("reservation %q owner %q", aws.ToString(out.ReservationId), aws.ToString(out.OwnerId))
	}

	rr, ok := emu.LastRunRequest()
	if !ok || rr.UserData != userData || rr.LaunchTemplateName != "norsk-worker" || rr.LaunchTemplateVersion != "2" ||
		rr.Tags["Name"] != "worker-1" || len(rr.SecurityGroupIDs) != 1 || rr.SecurityGroupIDs[0] != sg.ID || rr.ClientToken != "token-1" {
		t.Fatalf("LastRunRequest = %+v", rr)
	}
	if got := emu.Instances(); len(got) != 1 || got[0].LaunchTemplateID != lt.ID || got[0].UserData != userData {
		t.Fatalf("Instances = %+v", got)
	}

	// Still pending before PendingFor.
	clk.Add(29 * time.Second)
	ins := describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if len(ins) != 1 || ins[0].State.Name != types.InstanceStateNamePending {
		t.Fatalf("before PendingFor: %+v", ins)
	}
	clk.Add(time.Second)
	ins = describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	got := ins[0]
	if got.State.Name != types.InstanceStateNameRunning || aws.ToInt32(got.State.Code) != 16 {
		t.Fatalf("after PendingFor: state %+v", got.State)
	}
	if aws.ToString(got.PrivateIpAddress) != "127.0.0.10" || aws.ToString(got.PublicIpAddress) != "127.0.1.10" ||
		aws.ToString(got.PrivateDnsName) != "ip-127-0-0-10.eu-west-2.compute.internal" ||
		aws.ToString(got.PublicDnsName) != "ec2-127-0-1-10.eu-west-2.ec2emu.test" ||
		aws.ToString(got.Placement.AvailabilityZone) != "eu-west-2a" ||
		!got.LaunchTime.Equal(clk.Now().Add(-30*time.Second)) || tagsOf(got)["Name"] != "worker-1" {
		t.Fatalf("running instance: %+v (placement %+v)", got, got.Placement)
	}

	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	ch := term.TerminatingInstances
	if len(ch) != 1 || aws.ToString(ch[0].InstanceId) != id ||
		ch[0].PreviousState.Name != types.InstanceStateNameRunning || ch[0].CurrentState.Name != types.InstanceStateNameShuttingDown ||
		aws.ToInt32(ch[0].CurrentState.Code) != 32 {
		t.Fatalf("TerminatingInstances = %+v", ch)
	}
	clk.Add(10 * time.Second)
	got = describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})[0]
	if got.State.Name != types.InstanceStateNameTerminated || aws.ToInt32(got.State.Code) != 48 ||
		got.PrivateIpAddress != nil || got.PublicIpAddress != nil {
		t.Fatalf("terminated instance: %+v", got)
	}
	// Terminating a terminated instance is fine.
	term, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if s := term.TerminatingInstances[0]; s.PreviousState.Name != types.InstanceStateNameTerminated || s.CurrentState.Name != types.InstanceStateNameTerminated {
		t.Fatalf("second terminate: %+v", s)
	}
	for action, n := range map[string]int{ec2emu.ActionRunInstances: 1, ec2emu.ActionDescribeInstances: 3, ec2emu.ActionTerminateInstances: 2} {
		if got := emu.Calls(action); got != n {
			t.Errorf("Calls(%s) = %d, want %d", action, got, n)
		}
	}
}

// The SDK's own InstanceRunning waiter works against the emulator with real
// time.
func TestRunningWaiter(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{PendingFor: 150 * time.Millisecond})
	c := emu.Client()
	id := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
	w := ec2.NewInstanceRunningWaiter(c, func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	})
	if err := w.Wait(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if in, _ := emu.Instance(id); in.State != ec2emu.StateRunning {
		t.Fatalf("state %s", in.State)
	}
}

func TestClientTokenIdempotent(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client()
	in := func(token, typ string) *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{
			ClientToken:       aws.String(token),
			InstanceType:      types.InstanceType(typ),
			TagSpecifications: tagSpec("a", "1", "b", "2"),
		}
	}
	first := run(t, c, in("tok", "t3.small"))
	// With PendingFor 0 the launch answer is pending, the next read running.
	if first.Instances[0].State.Name != types.InstanceStateNamePending {
		t.Fatalf("launch state %v", first.Instances[0].State.Name)
	}
	second := run(t, c, in("tok", "t3.small"))
	id1, id2 := aws.ToString(first.Instances[0].InstanceId), aws.ToString(second.Instances[0].InstanceId)
	if id1 != id2 || aws.ToString(first.ReservationId) != aws.ToString(second.ReservationId) {
		t.Fatalf("same token gave %s and %s", id1, id2)
	}
	// The repeat shows the instance's current state, not a new launch.
	if second.Instances[0].State.Name != types.InstanceStateNameRunning {
		t.Fatalf("repeat state %v", second.Instances[0].State.Name)
	}
	// Tag order does not matter; other parameters do.
	reordered := in("tok", "t3.small")
	reordered.TagSpecifications = tagSpec("b", "2", "a", "1")
	if id := aws.ToString(run(t, c, reordered).Instances[0].InstanceId); id != id1 {
		t.Fatalf("reordered tags gave %s", id)
	}
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0"),
		ClientToken: aws.String("tok"), InstanceType: "t3.large", TagSpecifications: tagSpec("a", "1", "b", "2"),
	})
	wantCode(t, err, ec2emu.CodeIdempotentParameterMismatch, http.StatusBadRequest)

	// Without a ClientToken the SDK invents a fresh one per call: two
	// instances.
	a := run(t, c, &ec2.RunInstancesInput{})
	b := run(t, c, &ec2.RunInstancesInput{})
	if aws.ToString(a.Instances[0].ClientToken) == "" || aws.ToString(a.Instances[0].ClientToken) == aws.ToString(b.Instances[0].ClientToken) {
		t.Fatalf("SDK tokens %q %q", aws.ToString(a.Instances[0].ClientToken), aws.ToString(b.Instances[0].ClientToken))
	}
	if n := len(emu.Instances()); n != 3 {
		t.Fatalf("%d instances, want 3", n)
	}
}

func TestFilters(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{NeverRunning: true})
	c := emu.Client()
	ids := map[string]string{}
	for _, spec := range [][]string{
		{"w1", "cluster", "a", "role", "worker"},
		{"m1", "cluster", "a", "role", "manager"},
		{"w2", "cluster", "b", "role", "worker"},
		{"x", "other", "yes"},
	} {
		out := run(t, c, &ec2.RunInstancesInput{ClientToken: aws.String("tok-" + spec[0]), TagSpecifications: tagSpec(spec[1:]...)})
		ids[spec[0]] = aws.ToString(out.Instances[0].InstanceId)
	}
	if err := emu.SetState(ids["w1"], ec2emu.StateRunning); err != nil {
		t.Fatal(err)
	}
	if err := emu.SetState(ids["w2"], ec2emu.StateTerminated); err != nil {
		t.Fatal(err)
	}
	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	cases := []struct {
		name    string
		ids     []string
		filters []types.Filter
		want    []string
	}{
		{"tag", nil, []types.Filter{f("tag:cluster", "a")}, []string{"w1", "m1"}},
		{"tag values OR", nil, []types.Filter{f("tag:cluster", "a", "b")}, []string{"w1", "m1", "w2"}},
		{"filters AND", nil, []types.Filter{f("tag:cluster", "a", "b"), f("tag:role", "worker")}, []string{"w1", "w2"}},
		{"state", nil, []types.Filter{f("tag:role", "worker"), f("instance-state-name", "pending", "running")}, []string{"w1"}},
		{"state pending", nil, []types.Filter{f("instance-state-name", "pending")}, []string{"m1", "x"}},
		{"wildcard", nil, []types.Filter{f("tag:role", "man*")}, []string{"m1"}},
		{"question mark", nil, []types.Filter{f("tag:cluster", "?")}, []string{"w1", "m1", "w2"}},
		{"tag-key", nil, []types.Filter{f("tag-key", "other")}, []string{"x"}},
		{"tag absent", nil, []types.Filter{f("tag:nope", "*")}, nil},
		{"client-token", nil, []types.Filter{f("client-token", "tok-m1")}, []string{"m1"}},
		{"ids and filter", []string{ids["w1"], ids["m1"]}, []types.Filter{f("tag:role", "worker")}, []string{"w1"}},
		{"no filter", nil, nil, []string{"w1", "m1", "w2", "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: tc.ids, Filters: tc.filters})
			var gotIDs []string
			for _, in := range got {
				gotIDs = append(gotIDs, aws.ToString(in.InstanceId))
			}
			var want []string
			for _, k := range tc.want {
				want = append(want, ids[k])
			}
			if strings.Join(gotIDs, ",") != strings.Join(want, ",") {
				t.Fatalf("got %v, want %v (%v)", gotIDs, want, tc.want)
			}
		})
	}
	_, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{f("no-such-filter", "x")}})
	wantCode(t, err, ec2emu.CodeInvalidParameterValue, http.StatusBadRequest)
}

func TestPagination(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client()
	for i := 0; i < 12; i++ {
		run(t, c, &ec2.RunInstancesInput{TagSpecifications: tagSpec("k", "v")})
	}
	p := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
	pages, n := 0, 0
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range out.Reservations {
			n += len(r.Instances)
		}
	}
	if pages != 3 || n != 12 {
		t.Fatalf("%d pages, %d instances", pages, n)
	}
	_, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: []string{"i-0123456789abcdef0"}})
	wantCode(t, err, ec2emu.CodeInvalidParameterCombination, http.StatusBadRequest)
}

func TestSecurityGroups(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{SecurityGroups: []ec2emu.SecurityGroup{
		{Name: "workers", VpcID: "vpc-0bbbbbbbbbbbbbbb1"},
		{Name: "managers"},
	}})
	c := emu.Client()
	all := describeGroups(t, c, &ec2.DescribeSecurityGroupsInput{})
	if len(all) != 2 {
		t.Fatalf("%d groups", len(all))
	}
	workers := all[0]
	cases := []struct {
		name string
		in   *ec2.DescribeSecurityGroupsInput
		want []string
		code string
	}{
		{"filter group-name", &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("group-name"), Values: []string{"workers"}}}}, []string{"workers"}, ""},
		{"filter wildcard", &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("group-name"), Values: []string{"*ers"}}}}, []string{"workers", "managers"}, ""},
		{"filter no match", &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("group-name"), Values: []string{"nope"}}}}, nil, ""},
		{"filter vpc", &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("vpc-id"), Values: []string{ec2emu.DefaultVpcID}}}}, []string{"managers"}, ""},
		{"GroupNames", &ec2.DescribeSecurityGroupsInput{GroupNames: []string{"managers"}}, []string{"managers"}, ""},
		{"GroupIds", &ec2.DescribeSecurityGroupsInput{GroupIds: []string{aws.ToString(workers.GroupId)}}, []string{"workers"}, ""},
		{"unknown GroupName", &ec2.DescribeSecurityGroupsInput{GroupNames: []string{"nope"}}, nil, ec2emu.CodeInvalidGroupNotFound},
		{"unknown GroupId", &ec2.DescribeSecurityGroupsInput{GroupIds: []string{"sg-0123456789abcdef0"}}, nil, ec2emu.CodeInvalidGroupNotFound},
		{"bad filter", &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("colour"), Values: []string{"x"}}}}, nil, ec2emu.CodeInvalidParameterValue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeSecurityGroups(context.Background(), tc.in)
			if tc.code != "" {
				wantCode(t, err, tc.code, http.StatusBadRequest)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, g := range out.SecurityGroups {
				names = append(names, aws.ToString(g.GroupName))
				if !strings.HasPrefix(aws.ToString(g.GroupId), "sg-") || aws.ToString(g.VpcId) == "" {
					t.Errorf("group %+v", g)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", names, tc.want)
			}
		})
	}
	if aws.ToString(workers.VpcId) != "vpc-0bbbbbbbbbbbbbbb1" {
		t.Fatalf("workers vpc %s", aws.ToString(workers.VpcId))
	}

	// RunInstances checks groups once any are registered, and resolves
	// names.
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		ImageId: aws.String("ami-0123456789abcdef0"), SecurityGroupIds: []string{"sg-0123456789abcdef0"}})
	wantCode(t, err, ec2emu.CodeInvalidGroupNotFound, http.StatusBadRequest)
	out := run(t, c, &ec2.RunInstancesInput{SecurityGroups: []string{"managers"}})
	if g := out.Instances[0].SecurityGroups; len(g) != 1 || aws.ToString(g[0].GroupName) != "managers" {
		t.Fatalf("groups %+v", g)
	}

	// A removed group is gone for DescribeSecurityGroups and RunInstances
	// (a group deleted between a look-up and a launch).
	if !emu.RemoveSecurityGroup("workers") || emu.RemoveSecurityGroup("workers") {
		t.Fatal("RemoveSecurityGroup: want true, then false")
	}
	if got := describeGroups(t, c, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{{Name: aws.String("group-name"), Values: []string{"workers"}}}}); len(got) != 0 {
		t.Fatalf("removed group still described: %+v", got)
	}
	_, err = c.RunInstances(context.Background(), &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		ImageId: aws.String("ami-0123456789abcdef0"), SecurityGroupIds: []string{aws.ToString(workers.GroupId)}})
	wantCode(t, err, ec2emu.CodeInvalidGroupNotFound, http.StatusBadRequest)
}

func describeGroups(t *testing.T, c *ec2.Client, in *ec2.DescribeSecurityGroupsInput) []types.SecurityGroup {
	t.Helper()
	out, err := c.DescribeSecurityGroups(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out.SecurityGroups
}

// Each injected error reaches the SDK as its EC2 code and HTTP status, and
// the SDK's standard retryer retries exactly the ones the real service's
// status or code marks retryable.
func TestInjectedFaultsAndSDKRetries(t *testing.T) {
	cases := []struct {
		action    string
		fault     ec2emu.Fault
		status    int
		retryable bool
	}{
		{ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeRequestLimitExceeded), 503, true},
		{ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeUnavailable), 503, true},
		{ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeInternalError), 500, true},
		// Real EC2 sends InsufficientInstanceCapacity with HTTP 500, and
		// the standard retryer retries every 500: it IS retried.
		{ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeInsufficientInstanceCapacity), 500, true},
		// Only with a 4xx status would it not be.
		{ec2emu.ActionRunInstances, ec2emu.Fault{Code: ec2emu.CodeInsufficientInstanceCapacity, Status: 400}, 400, false},
		// A throttling code is retried whatever the status.
		{ec2emu.ActionRunInstances, ec2emu.Fault{Code: ec2emu.CodeRequestLimitExceeded, Status: 400}, 400, true},
		{ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeInstanceLimitExceeded), 400, false},
		{ec2emu.ActionDescribeInstances, ec2emu.FaultOf(ec2emu.CodeRequestLimitExceeded), 503, true},
		{ec2emu.ActionDescribeInstances, ec2emu.FaultOf(ec2emu.CodeInvalidInstanceIDNotFound), 400, false},
		{ec2emu.ActionTerminateInstances, ec2emu.FaultOf(ec2emu.CodeUnavailable), 503, true},
		{ec2emu.ActionTerminateInstances, ec2emu.FaultOf(ec2emu.CodeUnauthorizedOperation), 403, false},
		{ec2emu.ActionDescribeSecurityGroups, ec2emu.FaultOf(ec2emu.CodeRequestLimitExceeded), 503, true},
	}
	call := func(c *ec2.Client, action, id string) error {
		ctx := context.Background()
		var err error
		switch action {
		case ec2emu.ActionRunInstances:
			_, err = c.RunInstances(ctx, &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0")})
		case ec2emu.ActionDescribeInstances:
			_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		case ec2emu.ActionTerminateInstances:
			_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		case ec2emu.ActionDescribeSecurityGroups:
			_, err = c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{})
		}
		return err
	}
	for _, tc := range cases {
		t.Run(tc.action+"/"+tc.fault.Code+"/"+http.StatusText(tc.status), func(t *testing.T) {
			emu := ec2emu.Start(t, ec2emu.Options{})
			c := emu.Client(noBackoff)
			id := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
			emu.ResetCalls()

			// More faults than attempts: the call fails with the code.
			emu.InjectFault(tc.action, tc.fault, tc.fault, tc.fault, tc.fault)
			err := call(c, tc.action, id)
			wantCode(t, err, tc.fault.Code, tc.status)
			// EC2 models no errors: every one is a GenericAPIError without
			// a fault, so ErrorFault() cannot tell client from server
			// errors; the HTTP status can.
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorFault() != smithy.FaultUnknown {
				t.Errorf("ErrorFault() = %v, want FaultUnknown", ae.ErrorFault())
			}
			wantCalls := 1
			if tc.retryable {
				wantCalls = retry.DefaultMaxAttempts
				var maxErr *retry.MaxAttemptsError
				if !errors.As(err, &maxErr) {
					t.Errorf("retried error %v is not a MaxAttemptsError", err)
				}
			}
			if got := emu.Calls(tc.action); got != wantCalls {
				t.Fatalf("%d calls, want %d", got, wantCalls)
			}
			emu.ClearFaults()

			if !tc.retryable {
				return
			}
			// One fault: the SDK's retry succeeds.
			emu.ResetCalls()
			emu.InjectFault(tc.action, tc.fault)
			if err := call(c, tc.action, id); err != nil {
				t.Fatalf("after one %s: %v", tc.fault.Code, err)
			}
			if got := emu.Calls(tc.action); got != 2 {
				t.Fatalf("%d calls, want 2", got)
			}
		})
	}
}

// A provider that wants to fail fast on InsufficientInstanceCapacity (to
// try another zone or type) has to tell the standard retryer so.
func TestNoRetryOnInsufficientCapacityNeedsRetryerOption(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client(func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				var ae smithy.APIError
				if errors.As(err, &ae) && ae.ErrorCode() == ec2emu.CodeInsufficientInstanceCapacity {
					return aws.FalseTernary
				}
				return aws.UnknownTernary
			})}, so.Retryables...)
		})
	})
	emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeInsufficientInstanceCapacity, 3)...)
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0")})
	wantCode(t, err, ec2emu.CodeInsufficientInstanceCapacity, 500)
	if n := emu.Calls(ec2emu.ActionRunInstances); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
	if f, _ := emu.PendingFaults(ec2emu.ActionRunInstances); f != 2 {
		t.Fatalf("%d faults left, want 2", f)
	}
}

// The standard retryer's retry quota (500 tokens, 14 per non-throttle
// retry, 5 per throttle retry, given back only when a retry succeeds) runs
// out when one client meets many retryable errors: it then stops retrying.
func TestSDKRetryQuotaRunsOut(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client(noBackoff)
	emu.InjectFault(ec2emu.ActionDescribeSecurityGroups, ec2emu.Faults(ec2emu.CodeUnavailable, 100)...)
	var err error
	calls := 0
	for ; calls < 30; calls++ {
		before := emu.Calls(ec2emu.ActionDescribeSecurityGroups)
		_, err = c.DescribeSecurityGroups(context.Background(), &ec2.DescribeSecurityGroupsInput{})
		if emu.Calls(ec2emu.ActionDescribeSecurityGroups)-before < retry.DefaultMaxAttempts {
			break
		}
	}
	var qe ratelimit.QuotaExceededError
	if !errors.As(err, &qe) {
		t.Fatalf("after %d calls: %v, want a QuotaExceededError", calls, err)
	}
	wantCode(t, err, ec2emu.CodeUnavailable, 503) // still visible
	// 500 / (2 retries * 14) = 17 full calls, the 18th gets one retry.
	if calls != 17 {
		t.Fatalf("quota ran out on call %d, want 17", calls+1)
	}
}

func TestLostResponse(t *testing.T) {
	ctx := context.Background()
	runIn := func(token string) *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0"),
			ClientToken: aws.String(token), TagSpecifications: tagSpec("norsk:node", "n1")}
	}

	t.Run("dropped, no SDK retry: find by tag or token", func(t *testing.T) {
		emu := ec2emu.Start(t, ec2emu.Options{})
		c := emu.Client(maxAttempts(1))
		emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Fault{Drop: true})
		_, err := c.RunInstances(ctx, runIn("node-n1"))
		var ae smithy.APIError
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("want a transport error, got %v", err)
		}
		if n := len(emu.Instances()); n != 1 {
			t.Fatalf("%d instances created, want 1", n)
		}
		byTag := describe(t, c, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("tag:norsk:node"), Values: []string{"n1"}}}})
		byToken := describe(t, c, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("client-token"), Values: []string{"node-n1"}}}})
		if len(byTag) != 1 || len(byToken) != 1 || aws.ToString(byTag[0].InstanceId) != emu.Instances()[0].ID {
			t.Fatalf("by tag %d, by token %d", len(byTag), len(byToken))
		}
		again := run(t, c, runIn("node-n1"))
		if aws.ToString(again.Instances[0].InstanceId) != emu.Instances()[0].ID || len(emu.Instances()) != 1 {
			t.Fatalf("re-run with the same token created another instance")
		}
	})

	t.Run("dropped, SDK retry reuses its token", func(t *testing.T) {
		emu := ec2emu.Start(t, ec2emu.Options{})
		c := emu.Client(noBackoff)
		emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Fault{Drop: true})
		// No ClientToken: the SDK generates one, the same for its retries.
		out := run(t, c, &ec2.RunInstancesInput{})
		reqs := emu.RunRequests()
		if len(reqs) != 2 || reqs[0].ClientToken == "" || reqs[0].ClientToken != reqs[1].ClientToken ||
			!strings.HasPrefix(reqs[1].Attempt, "attempt=2") {
			t.Fatalf("requests %+v", reqs)
		}
		if n := len(emu.Instances()); n != 1 || emu.Instances()[0].ID != aws.ToString(out.Instances[0].InstanceId) {
			t.Fatalf("%d instances", n)
		}
	})

	t.Run("server error after the fact, every attempt", func(t *testing.T) {
		emu := ec2emu.Start(t, ec2emu.Options{})
		c := emu.Client(noBackoff)
		emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeInternalError, 3)...)
		_, err := c.RunInstances(ctx, runIn("node-n1"))
		wantCode(t, err, ec2emu.CodeInternalError, 500)
		if n := len(emu.Instances()); n != 1 || emu.Calls(ec2emu.ActionRunInstances) != 3 {
			t.Fatalf("%d instances after %d calls", n, emu.Calls(ec2emu.ActionRunInstances))
		}
	})

	t.Run("terminate lost", func(t *testing.T) {
		emu := ec2emu.Start(t, ec2emu.Options{})
		c := emu.Client(maxAttempts(1))
		id := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
		emu.InjectLostResponse(ec2emu.ActionTerminateInstances, ec2emu.FaultOf(ec2emu.CodeInternalError))
		_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		wantCode(t, err, ec2emu.CodeInternalError, 500)
		if in, _ := emu.Instance(id); in.State != ec2emu.StateTerminated {
			t.Fatalf("state %s", in.State)
		}
	})
}

func TestNeverRunning(t *testing.T) {
	clk := newClock()
	emu := ec2emu.Start(t, ec2emu.Options{NeverRunning: true, Now: clk.Now})
	c := emu.Client()
	stuck := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
	emu.SetNeverRunning(false)
	fine := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
	clk.Add(time.Hour)
	states := map[string]types.InstanceStateName{}
	for _, in := range describe(t, c, &ec2.DescribeInstancesInput{}) {
		states[aws.ToString(in.InstanceId)] = in.State.Name
	}
	if states[stuck] != types.InstanceStateNamePending || states[fine] != types.InstanceStateNameRunning {
		t.Fatalf("states %v", states)
	}
	if in, _ := emu.Instance(stuck); !in.NeverRunning {
		t.Fatal("NeverRunning not reported")
	}
	if err := emu.SetState(stuck, ec2emu.StateRunning); err != nil {
		t.Fatal(err)
	}
	if got := describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: []string{stuck}})[0].State.Name; got != types.InstanceStateNameRunning {
		t.Fatalf("after SetState: %s", got)
	}
	if err := emu.SetState("i-0123456789abcdef0", ec2emu.StateRunning); err == nil {
		t.Fatal("SetState of an unknown id succeeded")
	}
	if err := emu.SetState(stuck, "exploded"); err == nil {
		t.Fatal("SetState to an unknown state succeeded")
	}
	// Terminating a pending instance works too.
	out, err := c.TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{stuck}})
	if err != nil || out.TerminatingInstances[0].PreviousState.Name != types.InstanceStateNameRunning {
		t.Fatalf("terminate: %v %+v", err, out)
	}
}

func TestUnknownInstances(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client()
	known := aws.ToString(run(t, c, &ec2.RunInstancesInput{}).Instances[0].InstanceId)
	const unknown1, unknown2 = "i-0123456789abcdef0", "i-0fedcba9876543210"
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		code string
		msg  string
	}{
		{"describe one", func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{unknown1}})
			return err
		}, ec2emu.CodeInvalidInstanceIDNotFound, "The instance ID '" + unknown1 + "' does not exist"},
		{"describe mixed", func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{known, unknown1, unknown2}})
			return err
		}, ec2emu.CodeInvalidInstanceIDNotFound, "The instance IDs '" + unknown1 + ", " + unknown2 + "' do not exist"},
		{"terminate mixed", func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{known, unknown1}})
			return err
		}, ec2emu.CodeInvalidInstanceIDNotFound, "The instance ID '" + unknown1 + "' does not exist"},
		{"malformed", func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"node-1"}})
			return err
		}, ec2emu.CodeInvalidInstanceIDMalformed, `Invalid id: "node-1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			emu.ResetCalls()
			code, status, msg := apiCode(t, tc.call())
			if code != tc.code || status != 400 || msg != tc.msg {
				t.Fatalf("got %s %d %q, want %s 400 %q", code, status, msg, tc.code, tc.msg)
			}
			total := 0
			for _, n := range emu.CallCounts() {
				total += n
			}
			if total != 1 {
				t.Fatalf("%d calls: a 400 must not be retried", total)
			}
		})
	}
	// The mixed terminate did nothing.
	if in, _ := emu.Instance(known); in.State == ec2emu.StateShuttingDown || in.State == ec2emu.StateTerminated {
		t.Fatalf("known instance %s after failed terminate", in.State)
	}
}

func TestRunInstancesValidation(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "tmpl", Versions: 2}}})
	c := emu.Client()
	base := func(mod func(*ec2.RunInstancesInput)) *ec2.RunInstancesInput {
		in := &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0123456789abcdef0")}
		mod(in)
		return in
	}
	cases := []struct {
		name   string
		in     *ec2.RunInstancesInput
		code   string
		status int
	}{
		{"bad user data", base(func(in *ec2.RunInstancesInput) { in.UserData = aws.String("not base64!") }), ec2emu.CodeInvalidParameterValue, 400},
		{"unknown template id", base(func(in *ec2.RunInstancesInput) {
			in.LaunchTemplate = &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-0fedcba9876543210")}
		}), ec2emu.CodeInvalidLaunchTemplateIDNotFound, 400},
		{"unknown template name", base(func(in *ec2.RunInstancesInput) {
			in.LaunchTemplate = &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("nope")}
		}), ec2emu.CodeInvalidLaunchTemplateNameNotFound, 400},
		{"unknown version", base(func(in *ec2.RunInstancesInput) {
			in.LaunchTemplate = &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("tmpl"), Version: aws.String("3")}
		}), ec2emu.CodeInvalidLaunchTemplateVersion, 400},
		{"no image", base(func(in *ec2.RunInstancesInput) { in.ImageId = nil }), ec2emu.CodeMissingParameter, 400},
		{"min > max", base(func(in *ec2.RunInstancesInput) { in.MinCount = aws.Int32(2) }), ec2emu.CodeInvalidParameterValue, 400},
		{"dry run", base(func(in *ec2.RunInstancesInput) { in.DryRun = aws.Bool(true) }), ec2emu.CodeDryRunOperation, 412},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.RunInstances(context.Background(), tc.in)
			wantCode(t, err, tc.code, tc.status)
		})
	}
	if n := len(emu.Instances()); n != 0 {
		t.Fatalf("%d instances from failed runs", n)
	}
	if n := len(emu.RunRequests()); n != len(cases) {
		t.Fatalf("%d recorded requests, want %d", n, len(cases))
	}
	out := run(t, c, &ec2.RunInstancesInput{LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-0123456789abcdef0"), Version: aws.String("$Latest")}})
	if out.Instances[0].InstanceType != ec2emu.DefaultInstanceType {
		t.Fatalf("type %s", out.Instances[0].InstanceType)
	}
}

func TestAddressesAndCount(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{PrivateIPTemplate: "127.0.0.%d", FirstHost: 252})
	c := emu.Client()
	out := run(t, c, &ec2.RunInstancesInput{MinCount: aws.Int32(2), MaxCount: aws.Int32(2)})
	if len(out.Instances) != 2 || aws.ToString(out.Instances[0].PrivateIpAddress) != "127.0.0.252" || aws.ToString(out.Instances[1].PrivateIpAddress) != "127.0.0.253" {
		t.Fatalf("instances %+v", out.Instances)
	}
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{MinCount: aws.Int32(2), MaxCount: aws.Int32(2), ImageId: aws.String("ami-0123456789abcdef0")})
	wantCode(t, err, ec2emu.CodeInsufficientFreeAddresses, 400)

	fixed := ec2emu.Start(t, ec2emu.Options{PrivateIPTemplate: "127.0.0.1"})
	fc := fixed.Client()
	for i := 0; i < 3; i++ {
		if ip := aws.ToString(run(t, fc, &ec2.RunInstancesInput{}).Instances[0].PrivateIpAddress); ip != "127.0.0.1" {
			t.Fatalf("fixed template gave %s", ip)
		}
	}
}

// One emulator per region; a client signing for another region is refused.
func TestRegions(t *testing.T) {
	west := ec2emu.Start(t, ec2emu.Options{Region: "eu-west-2"})
	north := ec2emu.Start(t, ec2emu.Options{Region: "eu-north-1"})
	run(t, west.Client(), &ec2.RunInstancesInput{})
	if n := len(north.Instances()); n != 0 {
		t.Fatalf("north has %d instances", n)
	}
	if az := aws.ToString(run(t, north.Client(), &ec2.RunInstancesInput{}).Instances[0].Placement.AvailabilityZone); az != "eu-north-1a" {
		t.Fatalf("az %s", az)
	}
	// West's endpoint with a north-signed client.
	wrong := ec2.NewFromConfig(north.Config(), func(o *ec2.Options) { o.BaseEndpoint = aws.String(west.URL()) })
	_, err := wrong.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	wantCode(t, err, ec2emu.CodeAuthFailure, 401)
}

func TestFaultDelayAndCustomMessage(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client(maxAttempts(1))
	emu.InjectFault(ec2emu.ActionDescribeInstances, ec2emu.Fault{Delay: 2 * time.Second, Code: ec2emu.CodeInternalError})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	emu.InjectFault(ec2emu.ActionDescribeInstances, ec2emu.Fault{Code: "Custom.Code", Message: "custom message", Status: 409})
	code, status, msg := apiCode(t, func() error {
		_, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
		return err
	}())
	if code != "Custom.Code" || status != 409 || msg != "custom message" {
		t.Fatalf("got %s %d %q", code, status, msg)
	}
}

func TestStatusFor(t *testing.T) {
	for code, want := range map[string]int{
		ec2emu.CodeRequestLimitExceeded:         503,
		ec2emu.CodeUnavailable:                  503,
		ec2emu.CodeInsufficientInstanceCapacity: 500,
		ec2emu.CodeInternalError:                500,
		ec2emu.CodeInvalidInstanceIDNotFound:    400,
		ec2emu.CodeAuthFailure:                  401,
		ec2emu.CodeUnauthorizedOperation:        403,
		ec2emu.CodeDryRunOperation:              412,
	} {
		if got := ec2emu.StatusFor(code); got != want {
			t.Errorf("StatusFor(%s) = %d, want %d", code, got, want)
		}
	}
}

func TestTagsChangedElsewhere(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	c := emu.Client()
	id := aws.ToString(run(t, c, &ec2.RunInstancesInput{TagSpecifications: tagSpec("a", "1")}).Instances[0].InstanceId)
	if err := emu.SetTag(id, "b", "2"); err != nil {
		t.Fatal(err)
	}
	if err := emu.RemoveTag(id, "a"); err != nil {
		t.Fatal(err)
	}
	got := tagsOf(describe(t, c, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})[0])
	if len(got) != 1 || got["b"] != "2" {
		t.Fatalf("tags %v", got)
	}
	if emu.SetTag("i-0123456789abcdef0", "a", "b") == nil || emu.RemoveTag("i-0123456789abcdef0", "a") == nil {
		t.Fatal("unknown id accepted")
	}
	emu.Close() // Start's cleanup closes again
}

// The wire format without the SDK: what a hand-written client would see.
func TestWireFormat(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{})
	post := func(body string, auth bool) (int, string) {
		req, err := http.NewRequest(http.MethodPost, emu.URL(), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if auth {
			req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20260101/eu-west-2/ec2/aws4_request, SignedHeaders=host, Signature=00")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/xml") {
			t.Errorf("content type %q", ct)
		}
		return resp.StatusCode, b.String()
	}
	cases := []struct {
		name, body string
		auth       bool
		status     int
		contains   []string
	}{
		{"ok", "Action=DescribeInstances&Version=2016-11-15", true, 200, []string{"<DescribeInstancesResponse>", "<requestId>"}},
		{"no auth", "Action=DescribeInstances&Version=2016-11-15", false, 401, []string{"<Response><Errors><Error><Code>AuthFailure</Code><Message>", "</Errors><RequestID>"}},
		{"unknown action", "Action=RebootInstances&Version=2016-11-15", true, 400, []string{"<Code>InvalidAction</Code>"}},
		{"bad version", "Action=DescribeInstances&Version=2014-01-01", true, 400, []string{"<Code>NoSuchVersion</Code>"}},
		{"no action", "Version=2016-11-15", true, 400, []string{"<Code>MissingAction</Code>"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(tc.body, tc.auth)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			for _, s := range tc.contains {
				if !strings.Contains(body, s) {
					t.Fatalf("body lacks %q: %s", s, body)
				}
			}
		})
	}
	if n := emu.Calls("RebootInstances"); n != 1 {
		t.Fatalf("unknown action counted %d times", n)
	}
}

// A caller with one endpoint for all regions: Regions routes by the
// signature's region.
func TestRegionsSharedEndpoint(t *testing.T) {
	rs := ec2emu.StartRegions(t, ec2emu.Options{Region: "eu-west-2"}, ec2emu.Options{Region: "us-east-2", PrivateIPTemplate: "127.0.3.%d"})
	west, east := rs.Client("eu-west-2"), rs.Client("us-east-2")
	w := run(t, west, &ec2.RunInstancesInput{})
	e := run(t, east, &ec2.RunInstancesInput{})
	if aws.ToString(w.Instances[0].Placement.AvailabilityZone) != "eu-west-2a" || aws.ToString(e.Instances[0].PrivateIpAddress) != "127.0.3.10" {
		t.Fatalf("west %+v east %+v", w.Instances[0].Placement, aws.ToString(e.Instances[0].PrivateIpAddress))
	}
	if len(rs.Region("eu-west-2").Instances()) != 1 || len(rs.Region("us-east-2").Instances()) != 1 {
		t.Fatal("instances not kept per region")
	}
	// Faults are per region.
	rs.Region("us-east-2").InjectFault(ec2emu.ActionDescribeInstances, ec2emu.Fault{Code: ec2emu.CodeUnavailable, Status: 400})
	if _, err := west.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	_, err := east.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	wantCode(t, err, ec2emu.CodeUnavailable, 400)
	// The id of one region is unknown in the other.
	_, err = east.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{aws.ToString(w.Instances[0].InstanceId)}})
	wantCode(t, err, ec2emu.CodeInvalidInstanceIDNotFound, 400)
	_, err = rs.Client("ap-south-1").DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	wantCode(t, err, ec2emu.CodeAuthFailure, 401)
	if got := rs.Names(); strings.Join(got, ",") != "eu-west-2,us-east-2" {
		t.Fatalf("Names %v", got)
	}
}
