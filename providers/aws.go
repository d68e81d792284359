package providers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// AWSConfig configures the AWS provider.
type AWSConfig struct {
	// Base is the SDK configuration (credentials, retryer, HTTP client),
	// usually from config.LoadDefaultConfig: the standard chain of
	// environment, shared files, web identity and instance roles. Its
	// region is replaced by each request's region.
	Base aws.Config
	// Endpoint overrides the EC2 endpoint (tests; EC2-compatible clouds).
	// Empty: the SDK's endpoint for the region.
	Endpoint string
	// Health receives the outcome of every call; nil: a default tracker.
	Health *Health
	Logger *slog.Logger
	// SecurityGroupTTL and SecurityGroupMissingTTL are how long a security
	// group look-up that found a group, or found it missing, is kept
	// (aws_groups.go). Defaults DefaultSecurityGroupTTL and
	// DefaultSecurityGroupMissingTTL.
	SecurityGroupTTL        time.Duration
	SecurityGroupMissingTTL time.Duration
	// Clock reads the time for the look-up cache. Default time.Now.
	Clock func() time.Time
}

// AWS is the EC2 provider. Create it with NewAWS.
type AWS struct {
	cfg    AWSConfig
	health *Health
	log    *slog.Logger

	mu      sync.Mutex
	clients map[string]*ec2.Client // by region

	groups sgCache
}

var _ Provider = (*AWS)(nil)

// NewAWS returns the EC2 provider for cfg.
func NewAWS(cfg AWSConfig) *AWS {
	h := cfg.Health
	if h == nil {
		h = NewHealth(0, 0, nil, nil)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.SecurityGroupTTL <= 0 {
		cfg.SecurityGroupTTL = DefaultSecurityGroupTTL
	}
	if cfg.SecurityGroupMissingTTL <= 0 {
		cfg.SecurityGroupMissingTTL = DefaultSecurityGroupMissingTTL
	}
	return &AWS{cfg: cfg, health: h, log: log.With("provider", "aws"), clients: map[string]*ec2.Client{}}
}

// Kind implements Provider.
func (a *AWS) Kind() managerpb.NodeProvider { return managerpb.NodeProvider_NODE_PROVIDER_AWS }

// Health implements Provider.
func (a *AWS) Health() *Health { return a.health }

func (a *AWS) client(region string) *ec2.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.clients[region]; c != nil {
		return c
	}
	c := ec2.NewFromConfig(a.cfg.Base, func(o *ec2.Options) {
		o.Region = region
		// The provider retries itself (call), so that capacity errors are
		// not retried and every attempt reaches Health.
		o.Retryer = aws.NopRetryer{}
		if a.cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(a.cfg.Endpoint)
		}
	})
	a.clients[region] = c
	return c
}

// classify maps an EC2 error to a Health outcome and whether a retry can
// help.
func classifyAWS(err error) (Outcome, bool) {
	if err == nil {
		return OK, false
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		// EC2 errors are all generic (no fault): tell them apart by code,
		// then by HTTP status.
		switch code := apiErr.ErrorCode(); {
		case code == "RequestLimitExceeded" || code == "Throttling" || code == "ThrottlingException":
			return Throttled, true
		case code == "InsufficientInstanceCapacity" || code == "InsufficientHostCapacity" || code == "InsufficientCapacity" ||
			code == "InstanceLimitExceeded" || code == "VcpuLimitExceeded" || code == "MaxSpotInstanceCountExceeded":
			return NoCapacity, false
		case code == "Unavailable" || code == "ServiceUnavailable" || code == "InternalError" || code == "InternalFailure":
			return Outage, true
		}
		var re *awshttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
			return Outage, true
		}
		return OK, false // a request error: the cloud is healthy
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OK, false
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return Outage, true // network
	}
	return OK, false // the SDK refused the request itself (a bad region, a parameter): nothing a retry fixes
}

// call runs f with retries on throttling and transient errors (Backoff)
// until ctx ends, recording outcomes in region's health.
func (a *AWS) call(ctx context.Context, region, what string, f func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		if err != nil && ctx.Err() != nil {
			return err // cut short by the caller: says nothing about the cloud
		}
		o, retry := classifyAWS(err)
		a.health.Record(region, o)
		if err == nil || !retry {
			return err
		}
		d := Backoff(attempt)
		a.log.Warn("cloud call failed; retrying", "call", what, "region", region, "in", d, "error", err)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		}
	}
}

// Launch implements Provider: RunInstances from the request's launch
// template (id or name, version), instance type, availability zone (if
// set), the node's tags and the
// node id tag, the resolved extra security groups, and the user data;
// the node id is the ClientToken. A security group that does not exist
// (before the launch, or RunInstances' InvalidGroup.NotFound) is a
// *SecurityGroupsMissingError (ErrSecurityGroupNotFound, ErrRejected).
func (a *AWS) Launch(ctx context.Context, spec LaunchSpec) (Instance, error) {
	req := spec.AWS
	region := req.GetRegion()
	in := &ec2.RunInstancesInput{
		MinCount:    aws.Int32(1),
		MaxCount:    aws.Int32(1),
		ClientToken: aws.String(clientToken(launchToken(spec))),
		UserData:    aws.String(base64.StdEncoding.EncodeToString([]byte(spec.UserData))),
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeInstance,
			Tags:         awsTags(spec.NodeID, spec.Tags),
		}},
	}
	if it := req.GetInstanceType(); it != "" {
		in.InstanceType = types.InstanceType(it)
	}
	if z := req.GetAvailabilityZone(); z != "" {
		in.Placement = &types.Placement{AvailabilityZone: aws.String(z)}
	}
	if t := req.GetTemplate(); t != nil {
		lt := &types.LaunchTemplateSpecification{}
		if id := t.GetId(); id != "" {
			lt.LaunchTemplateId = aws.String(id)
		} else {
			lt.LaunchTemplateName = aws.String(t.GetName())
		}
		if v := t.GetVersion(); v != "" {
			lt.Version = aws.String(v)
		}
		in.LaunchTemplate = lt
	}
	groups := req.GetExtraSecurityGroups()
	if len(groups) > 0 {
		ids, err := a.securityGroupIDs(ctx, region, groups)
		if err != nil {
			return Instance{}, err
		}
		in.SecurityGroupIds = ids
	}
	var out *ec2.RunInstancesOutput
	err := a.call(ctx, region, "RunInstances", func(ctx context.Context) error {
		var err error
		out, err = a.client(region).RunInstances(ctx, in)
		return err
	})
	if err != nil {
		if gerr := a.groupNotFound(err, region, groups, in.SecurityGroupIds); gerr != nil {
			return Instance{}, gerr
		}
		return Instance{}, awsLaunchError(err)
	}
	if len(out.Instances) == 0 {
		return Instance{}, fmt.Errorf("RunInstances in %s returned no instance", region)
	}
	a.health.Record(region, Launched)
	return awsInstance(region, out.Instances[0]), nil
}

// clientToken is the idempotency token of a node's launch (EC2 allows 64
// printable ASCII characters; longer or other tokens are hashed).
func clientToken(token string) string {
	ascii := true
	for i := 0; i < len(token); i++ {
		ascii = ascii && token[i] >= 0x20 && token[i] < 0x7f
	}
	if len(token) <= 64 && ascii {
		return token
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func awsLaunchError(err error) error {
	o, retry := classifyAWS(err)
	if o == NoCapacity {
		return fmt.Errorf("%w: %w", ErrCapacity, err)
	}
	var apiErr smithy.APIError
	if o == OK && !retry && !errors.As(err, &apiErr) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

func awsTags(nodeID string, tags map[string]string) []types.Tag {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []types.Tag{{Key: aws.String(NodeIDTag), Value: aws.String(nodeID)}}
	for _, k := range keys {
		if k != NodeIDTag {
			out = append(out, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
		}
	}
	return out
}

// Find implements Provider: DescribeInstances by the node id tag, skipping
// terminated and shutting-down instances.
func (a *AWS) Find(ctx context.Context, region, nodeID string) (Instance, bool, error) {
	var out *ec2.DescribeInstancesOutput
	err := a.call(ctx, region, "DescribeInstances", func(ctx context.Context) error {
		var err error
		out, err = a.client(region).DescribeInstances(ctx, &ec2.DescribeInstancesInput{
			Filters: []types.Filter{{Name: aws.String("tag:" + NodeIDTag), Values: []string{nodeID}}},
		})
		return err
	})
	if err != nil {
		return Instance{}, false, err
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			if inst := awsInstance(region, i); inst.State != Gone {
				return inst, true, nil
			}
		}
	}
	return Instance{}, false, nil
}

// Describe implements Provider.
func (a *AWS) Describe(ctx context.Context, region, id string) (Instance, error) {
	var out *ec2.DescribeInstancesOutput
	err := a.call(ctx, region, "DescribeInstances", func(ctx context.Context) error {
		var err error
		out, err = a.client(region).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		return err
	})
	if isAWSNotFound(err) {
		return Instance{}, fmt.Errorf("%w: %s in %s", ErrNotFound, id, region)
	}
	if err != nil {
		return Instance{}, err
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			return awsInstance(region, i), nil
		}
	}
	return Instance{}, fmt.Errorf("%w: %s in %s", ErrNotFound, id, region)
}

// Terminate implements Provider.
func (a *AWS) Terminate(ctx context.Context, region, id string) error {
	err := a.call(ctx, region, "TerminateInstances", func(ctx context.Context) error {
		_, err := a.client(region).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		return err
	})
	if isAWSNotFound(err) {
		return nil
	}
	return err
}

func isAWSNotFound(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && strings.HasPrefix(apiErr.ErrorCode(), "InvalidInstanceID.")
}

func awsInstance(region string, i types.Instance) Instance {
	inst := Instance{ID: aws.ToString(i.InstanceId), Location: region, State: Pending}
	if i.State != nil {
		switch i.State.Name {
		case types.InstanceStateNameRunning:
			inst.State = Running
		case types.InstanceStateNamePending:
			inst.State = Pending
		default:
			inst.State = Gone
		}
	}
	inst.Running = &commonpb.RunningNodeMetadata{
		ProviderMetadata: &commonpb.RunningNodeProviderMetadata{Instance: &commonpb.RunningNodeProviderMetadata_Aws{Aws: &commonpb.RunningAwsMetadata{InstanceId: inst.ID}}},
		PrivateIpAddress: aws.ToString(i.PrivateIpAddress),
		PublicIpAddress:  aws.ToString(i.PublicIpAddress),
		PrivateDnsName:   aws.ToString(i.PrivateDnsName),
		PublicDnsName:    aws.ToString(i.PublicDnsName),
	}
	return inst
}
