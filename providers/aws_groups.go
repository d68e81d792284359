package providers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// Security groups (issue 21 §9; docs/design/providers.md, "Security
// groups (AWS)"): a node's extra security groups are names, resolved to ids
// with DescribeSecurityGroups (filter group-name) before RunInstances. The
// answers are cached per region — a group found for
// DefaultSecurityGroupTTL, a group missing for DefaultSecurityGroupMissingTTL
// (shorter: an operator who creates the group should not wait long) — so
// the placement engine's check before a create and the launch that
// follows cost one call, not two.

// Cache lifetimes of security group look-ups (AWSConfig overrides them).
const (
	DefaultSecurityGroupTTL        = time.Minute
	DefaultSecurityGroupMissingTTL = 10 * time.Second
)

// ErrSecurityGroupNotFound: a security group named in a launch (a job's
// or a tier's extra_security_groups) does not exist in the region. It is
// the fault of whoever named the group, not of the instance type or zone:
// the placement engine does not back off the offering for it
// (pools.md, "Security groups of a job in an AWS tier"). Errors wrapping it also
// wrap ErrRejected.
var ErrSecurityGroupNotFound = errors.New("providers: security group not found")

// SecurityGroupsMissingError is the error of a look-up or a launch that
// found security groups missing in a region. Its text, which crosses the
// node record as CloudNode.last_error, is
//
//	providers: security group not found: "a", "b" in region eu-west-2[: <the cloud's error>]
//
// (names quoted as Go strings); actors/provisioner reads the names and
// the region back from it (provisioner.MissingGroupsOf).
type SecurityGroupsMissingError struct {
	Region string
	// Groups are the missing names, sorted.
	Groups []string
	// Cause is the cloud's error (RunInstances InvalidGroup.NotFound),
	// nil when the look-up found the groups missing.
	Cause error
}

// Error implements error.
func (e *SecurityGroupsMissingError) Error() string {
	q := make([]string, len(e.Groups))
	for i, g := range e.Groups {
		q[i] = strconv.Quote(g)
	}
	s := fmt.Sprintf("%s: %s in region %s", ErrSecurityGroupNotFound, strings.Join(q, ", "), e.Region)
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is reports ErrSecurityGroupNotFound and ErrRejected.
func (e *SecurityGroupsMissingError) Is(target error) bool {
	return target == ErrSecurityGroupNotFound || target == ErrRejected
}

// Unwrap returns the cloud's error, if any.
func (e *SecurityGroupsMissingError) Unwrap() error { return e.Cause }

// sgCache holds security group look-ups per region. The zero value is
// ready; guarded by mu.
type sgCache struct {
	mu       sync.Mutex
	byRegion map[string]map[string]sgEntry
}

// sgEntry is one name's answer: id "" when the group was missing.
type sgEntry struct {
	id string
	at time.Time
}

func (a *AWS) now() time.Time {
	if a.cfg.Clock != nil {
		return a.cfg.Clock()
	}
	return time.Now()
}

// cached returns the fresh answers for names in region and the names
// with none.
func (a *AWS) cached(region string, names []string) (map[string]sgEntry, []string) {
	now := a.now()
	a.groups.mu.Lock()
	defer a.groups.mu.Unlock()
	got := map[string]sgEntry{}
	var stale []string
	for _, n := range names {
		e, ok := a.groups.byRegion[region][n]
		ttl := a.cfg.SecurityGroupTTL
		if e.id == "" {
			ttl = a.cfg.SecurityGroupMissingTTL
		}
		if ok && now.Sub(e.at) < ttl && !now.Before(e.at) {
			got[n] = e
			continue
		}
		if !slices.Contains(stale, n) {
			stale = append(stale, n)
		}
	}
	return got, stale
}

// forgetGroups drops the cached answers for names in region (a launch
// found one of them missing although the cache said it was there).
func (a *AWS) forgetGroups(region string, names []string) {
	a.groups.mu.Lock()
	defer a.groups.mu.Unlock()
	for _, n := range names {
		delete(a.groups.byRegion[region], n)
	}
}

// resolveGroups returns the ids of names in region (from the cache, else
// DescribeSecurityGroups) and the names that do not exist, sorted.
func (a *AWS) resolveGroups(ctx context.Context, region string, names []string) (map[string]string, []string, error) {
	got, stale := a.cached(region, names)
	if len(stale) > 0 {
		var out *ec2.DescribeSecurityGroupsOutput
		err := a.call(ctx, region, "DescribeSecurityGroups", func(ctx context.Context) error {
			var err error
			out, err = a.client(region).DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
				Filters: []types.Filter{{Name: aws.String("group-name"), Values: stale}},
			})
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("resolve security groups %s in %s: %w", strings.Join(stale, ", "), region, err)
		}
		now := a.now()
		fresh := map[string]sgEntry{}
		for _, n := range stale {
			fresh[n] = sgEntry{at: now}
		}
		for _, g := range out.SecurityGroups {
			if n := aws.ToString(g.GroupName); slices.Contains(stale, n) {
				fresh[n] = sgEntry{id: aws.ToString(g.GroupId), at: now}
			}
		}
		a.groups.mu.Lock()
		if a.groups.byRegion == nil {
			a.groups.byRegion = map[string]map[string]sgEntry{}
		}
		if a.groups.byRegion[region] == nil {
			a.groups.byRegion[region] = map[string]sgEntry{}
		}
		for n, e := range fresh {
			a.groups.byRegion[region][n] = e
			got[n] = e
		}
		a.groups.mu.Unlock()
	}
	ids := map[string]string{}
	var missing []string
	for _, n := range names {
		if e := got[n]; e.id != "" {
			ids[n] = e.id
		} else if !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	return ids, missing, nil
}

// MissingSecurityGroups returns the names among names that are no
// security group in region, sorted (nil when all exist), from the cache
// or DescribeSecurityGroups. The error is the cloud's when it could not
// answer (throttling and transient errors are retried until ctx ends).
// The placement engine asks before it creates an AWS node, so that a job
// naming a group that does not exist gets no node and its tier stays
// open for the other jobs.
func (a *AWS) MissingSecurityGroups(ctx context.Context, region string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	_, missing, err := a.resolveGroups(ctx, region, names)
	return missing, err
}

// securityGroupIDs resolves security group names to ids in names' order;
// missing names are a *SecurityGroupsMissingError.
func (a *AWS) securityGroupIDs(ctx context.Context, region string, names []string) ([]string, error) {
	byName, missing, err := a.resolveGroups(ctx, region, names)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, &SecurityGroupsMissingError{Region: region, Groups: missing}
	}
	ids := make([]string, 0, len(names))
	for _, n := range names {
		ids = append(ids, byName[n])
	}
	return ids, nil
}

// groupNotFound returns the *SecurityGroupsMissingError of a RunInstances
// that EC2 refused with InvalidGroup.NotFound although the groups
// resolved (deleted in between), naming the group whose id or name the
// message names (all of them when it names none), and forgets the cached
// ids; nil for any other error.
func (a *AWS) groupNotFound(err error, region string, names, ids []string) error {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || (apiErr.ErrorCode() != "InvalidGroup.NotFound" && apiErr.ErrorCode() != "InvalidGroupId.NotFound") {
		return nil
	}
	a.forgetGroups(region, names)
	var which []string
	for i, n := range names {
		if strings.Contains(apiErr.ErrorMessage(), "'"+ids[i]+"'") || strings.Contains(apiErr.ErrorMessage(), "'"+n+"'") {
			which = append(which, n)
		}
	}
	if len(which) == 0 {
		which = slices.Clone(names)
	}
	slices.Sort(which)
	return &SecurityGroupsMissingError{Region: region, Groups: which, Cause: err}
}
