// Package ec2emu is an in-process emulator of the small subset of the AWS
// EC2 Query API that a node provider uses: RunInstances, DescribeInstances,
// TerminateInstances and DescribeSecurityGroups.
//
// An Emulator is an httptest server on 127.0.0.1 that speaks the EC2 Query
// protocol (form-encoded POST, Action=…&Version=2016-11-15, XML answers
// shaped like EC2's, errors as <Response><Errors><Error><Code>…) well
// enough for the real
// aws-sdk-go-v2 EC2 client, pointed at it with
//
//	ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(emu.URL()) })
//
// to parse every answer. Config and Client build such a client.
//
// One Emulator is one region of one account. A provider that uses one client
// per region gets one Emulator per region; the Emulator rejects requests
// signed for another region with AuthFailure (401), which catches a client
// used for the wrong region.
//
// Instances are simulated, not run: an instance is a record that moves
// pending → running (after Options.PendingFor, or on SetState) and
// running → shutting-down → terminated (on TerminateInstances, then after
// Options.ShuttingDownFor). Its addresses come from test-chosen templates,
// by default loopback addresses, so a test can start a real worker on the
// address the provider will read from DescribeInstances.
//
// Test controls: InjectFault queues errors for the next calls of an action,
// InjectLostResponse lets an action take effect but fails its response,
// Calls counts requests per action, RunRequests / LastRunRequest give the
// decoded RunInstances inputs (user data, tags, template, security groups),
// Instances lists the instances, SetState and SetNeverRunning drive the
// lifecycle.
//
// See docs/design/cloud-emulators.md for what is and is not emulated.
package ec2emu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// APIVersion is the only EC2 API version the emulator accepts in the
// Version form field; it is the version aws-sdk-go-v2 sends.
const APIVersion = "2016-11-15"

// The actions the emulator serves, as sent in the Action form field. They
// are the keys of InjectFault, InjectLostResponse and Calls.
const (
	ActionRunInstances           = "RunInstances"
	ActionDescribeInstances      = "DescribeInstances"
	ActionTerminateInstances     = "TerminateInstances"
	ActionDescribeSecurityGroups = "DescribeSecurityGroups"
)

// The instance state names, as EC2 reports them in instanceState/name.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

// stateCodes are EC2's instanceState/code values (the low byte).
var stateCodes = map[string]int{
	StatePending:      0,
	StateRunning:      16,
	StateShuttingDown: 32,
	StateTerminated:   48,
	StateStopping:     64,
	StateStopped:      80,
}

// StateCode returns EC2's numeric code of a state name (pending 0,
// running 16, shutting-down 32, terminated 48, stopping 64, stopped 80) and
// false for an unknown name.
func StateCode(state string) (int, bool) {
	c, ok := stateCodes[state]
	return c, ok
}

// Defaults of Options.
const (
	DefaultRegion            = "eu-west-2"
	DefaultPrivateIPTemplate = "127.0.0.%d"
	DefaultFirstHost         = 10
	DefaultInstanceType      = "t3.micro"
	DefaultOwnerID           = "000000000000"
	DefaultVpcID             = "vpc-0e0000000000000e1"
	DefaultSubnetID          = "subnet-0e0000000000000e1"
	// DefaultDNSDomain is the domain of public DNS names. It is a reserved
	// (RFC 2606) name so that nothing ever resolves it.
	DefaultDNSDomain = "ec2emu.test"
)

// Options configure an Emulator. The zero value is usable: region
// eu-west-2, instances running as soon as they are next observed, private
// addresses 127.0.0.10, 127.0.0.11, …, no public addresses, no security
// groups or launch templates registered (so any are accepted).
type Options struct {
	// Region is the region this emulator serves (DefaultRegion if empty).
	// Requests whose SigV4 credential scope names another region fail
	// with AuthFailure (401). The availability zone is Region+"a" unless
	// AvailabilityZone is set.
	Region string
	// AvailabilityZone reported in Placement (Region+"a" if empty).
	AvailabilityZone string

	// PendingFor is how long a new instance stays pending before it is
	// reported running. 0 means it is running the next time it is observed
	// (the RunInstances answer itself always says pending). Transitions are
	// evaluated when an instance is observed, not by timers.
	PendingFor time.Duration
	// NeverRunning makes instances stay pending until SetState moves them
	// (see also SetNeverRunning).
	NeverRunning bool
	// ShuttingDownFor is how long a terminated instance stays
	// shutting-down before it is reported terminated; 0 means terminated
	// the next time it is observed (TerminateInstances itself always
	// answers shutting-down for a live instance).
	ShuttingDownFor time.Duration

	// PrivateIPTemplate makes private IPv4 addresses: fmt.Sprintf(template,
	// host) with host = FirstHost, FirstHost+1, … for successive
	// instances. A template without a %d is used verbatim for every
	// instance (e.g. "127.0.0.1"). Default DefaultPrivateIPTemplate. When
	// host would exceed 254 RunInstances fails with
	// InsufficientFreeAddressesInSubnet.
	PrivateIPTemplate string
	// PublicIPTemplate, if set, gives instances a public address the same
	// way (same host number), assigned when the instance becomes running
	// and released at terminated. Empty: no public addresses.
	PublicIPTemplate string
	// FirstHost is the first host number (default DefaultFirstHost).
	FirstHost int
	// DNSDomain is the domain of public DNS names (default
	// DefaultDNSDomain). Private names are ip-a-b-c-d.<region>.compute.internal
	// like EC2's; public ones ec2-a-b-c-d.<region>.<DNSDomain>. Neither
	// resolves: use the addresses.
	DNSDomain string

	// DefaultInstanceType is used when neither the request nor its launch
	// template names one (default DefaultInstanceType).
	DefaultInstanceType string
	// OwnerID is the account id in reservations and security groups
	// (default DefaultOwnerID).
	OwnerID string
	// VpcID is the VPC of instances (default DefaultVpcID).
	VpcID string
	// SubnetID is the subnet of instances launched without SubnetId
	// (default DefaultSubnetID).
	SubnetID string

	// SecurityGroups are registered at start (see AddSecurityGroup).
	SecurityGroups []SecurityGroup
	// LaunchTemplates are registered at start (see AddLaunchTemplate).
	LaunchTemplates []LaunchTemplate

	// Now is the clock (time.Now if nil); tests may fake it to drive the
	// timed transitions.
	Now func() time.Time
}

// SecurityGroup is a registered security group, returned by
// DescribeSecurityGroups and checked by RunInstances.
type SecurityGroup struct {
	// ID is the group id (sg-…); AddSecurityGroup invents one if empty.
	ID string
	// Name is the group name (unique in the emulator).
	Name string
	// VpcID is the group's VPC (Options.VpcID if empty).
	VpcID string
	// Description is the group description (the name if empty).
	Description string
}

// LaunchTemplate is a registered launch template, checked by RunInstances
// and supplying defaults the request leaves out.
type LaunchTemplate struct {
	// ID is the template id (lt-…); AddLaunchTemplate invents one if empty.
	ID string
	// Name is the template name.
	Name string
	// Versions is the number of versions (1 if 0): a request may name
	// "$Latest", "$Default" or a number from 1 to Versions.
	Versions int
	// ImageID, InstanceType and SecurityGroupIDs apply when the request
	// does not set them.
	ImageID          string
	InstanceType     string
	SecurityGroupIDs []string
	// Tags are instance tags of the template; request tags with the same
	// key win.
	Tags map[string]string
}

// Instance is a snapshot of one emulated instance.
type Instance struct {
	// ID is the instance id (i- and 17 hex digits).
	ID string
	// ReservationID is the id (r-…) shared by the instances of one
	// RunInstances call.
	ReservationID string
	// ImageID is the AMI id from the request or its launch template ("" if
	// neither had one).
	ImageID string
	// InstanceType is from the request, else its launch template, else
	// Options.DefaultInstanceType.
	InstanceType string
	// State is the state name (StatePending, …) at the time of the
	// snapshot, after applying due timed transitions.
	State string
	// StateSince is when the instance entered State (by Options.Now).
	StateSince time.Time
	// PrivateIP and PublicIP are the addresses as assigned, even when the
	// current state hides them in DescribeInstances (terminated instances
	// report none, pending ones no public address). PublicIP is "" without
	// Options.PublicIPTemplate.
	PrivateIP string
	PublicIP  string
	// PrivateDNS and PublicDNS are the DNS names derived from the
	// addresses (see Options.DNSDomain); they do not resolve.
	PrivateDNS string
	PublicDNS  string
	// AvailabilityZone is the zone in Placement: the requested one, else
	// Options.AvailabilityZone.
	AvailabilityZone string
	// SubnetID is the requested subnet, else Options.SubnetID.
	SubnetID string
	// VpcID is Options.VpcID.
	VpcID string
	// SecurityGroupIDs are the groups the instance was launched in
	// (requested ids, then requested names resolved to ids; the template's
	// if the request named none). Unresolvable names are dropped when no
	// group is registered.
	SecurityGroupIDs []string
	// LaunchTime is when RunInstances created it (by Options.Now).
	LaunchTime time.Time
	// Tags are the instance tags (a copy).
	Tags map[string]string
	// ClientToken is the idempotency token of the RunInstances that
	// created it (the SDK generates one if the caller did not).
	ClientToken string
	// LaunchTemplateID, LaunchTemplateName and LaunchTemplateVersion are
	// as requested (the id filled in from a registered template named by
	// name).
	LaunchTemplateID      string
	LaunchTemplateName    string
	LaunchTemplateVersion string
	// UserData is the decoded user data.
	UserData string
	// NeverRunning reports that the instance was launched while
	// NeverRunning was set: it stays pending until SetState.
	NeverRunning bool
}

// RunRequest is one decoded RunInstances request, recorded whether or not
// it succeeded (faulted requests included).
type RunRequest struct {
	// ClientToken as sent (the SDK fills in a random one when the caller
	// leaves it empty; it is the same across the SDK's retries).
	ClientToken string
	// ImageID and InstanceType are ImageId and InstanceType ("" if not
	// sent).
	ImageID      string
	InstanceType string
	// MinCount and MaxCount are as sent (0 if absent, -1 if not a number).
	MinCount, MaxCount int
	// LaunchTemplateID, LaunchTemplateName and LaunchTemplateVersion are
	// the LaunchTemplate fields.
	LaunchTemplateID      string
	LaunchTemplateName    string
	LaunchTemplateVersion string
	// SubnetID is SubnetId.
	SubnetID string
	// AvailabilityZone is Placement.AvailabilityZone ("" if not sent).
	AvailabilityZone string
	// SecurityGroupIDs and SecurityGroupNames are SecurityGroupId.N and
	// SecurityGroup.N.
	SecurityGroupIDs   []string
	SecurityGroupNames []string
	// UserData is the base64-decoded user data ("" if it does not decode);
	// UserDataBase64 the field as sent. The SDK does not encode user data:
	// the caller must.
	UserData       string
	UserDataBase64 string
	// Tags are the tags of the TagSpecifications with ResourceType
	// instance; TagsByResource has every TagSpecification by resource type.
	Tags           map[string]string
	TagsByResource map[string]map[string]string
	// DryRun reports DryRun=true.
	DryRun bool
	// Attempt is the SDK's amz-sdk-request header ("attempt=2; max=3"),
	// useful to tell the SDK's retries from the provider's.
	Attempt string
	// Form is the whole request form.
	Form map[string][]string
}

// Emulator is one emulated EC2 region. Its methods are safe for concurrent
// use.
type Emulator struct {
	opts Options
	srv  *httptest.Server

	mu           sync.Mutex
	seq          int // instance counter (host numbers)
	instances    []*instance
	byID         map[string]*instance
	reservations map[string][]*instance // by reservation id
	tokens       map[string]tokenEntry
	groups       []SecurityGroup
	templates    []LaunchTemplate
	faults       map[string][]Fault
	lost         map[string][]Fault
	calls        map[string]int
	runRequests  []RunRequest
	neverRunning bool
	// noCapacity holds the zones out of capacity (SetNoCapacity).
	noCapacity map[string]bool
}

type tokenEntry struct {
	fingerprint string
	reservation string
}

type instance struct {
	Instance
}

// New starts an Emulator on 127.0.0.1 with opts. Close stops it.
func New(opts Options) *Emulator {
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.AvailabilityZone == "" {
		opts.AvailabilityZone = opts.Region + "a"
	}
	if opts.PrivateIPTemplate == "" {
		opts.PrivateIPTemplate = DefaultPrivateIPTemplate
	}
	if opts.FirstHost == 0 {
		opts.FirstHost = DefaultFirstHost
	}
	if opts.DNSDomain == "" {
		opts.DNSDomain = DefaultDNSDomain
	}
	if opts.DefaultInstanceType == "" {
		opts.DefaultInstanceType = DefaultInstanceType
	}
	if opts.OwnerID == "" {
		opts.OwnerID = DefaultOwnerID
	}
	if opts.VpcID == "" {
		opts.VpcID = DefaultVpcID
	}
	if opts.SubnetID == "" {
		opts.SubnetID = DefaultSubnetID
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	e := &Emulator{
		opts:         opts,
		byID:         map[string]*instance{},
		reservations: map[string][]*instance{},
		tokens:       map[string]tokenEntry{},
		faults:       map[string][]Fault{},
		lost:         map[string][]Fault{},
		calls:        map[string]int{},
		neverRunning: opts.NeverRunning,
	}
	for _, g := range opts.SecurityGroups {
		e.AddSecurityGroup(g)
	}
	for _, t := range opts.LaunchTemplates {
		e.AddLaunchTemplate(t)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serveHTTP))
	return e
}

// Start is New for a test: the emulator is closed when t ends.
func Start(t testing.TB, opts Options) *Emulator {
	t.Helper()
	e := New(opts)
	t.Cleanup(e.Close)
	return e
}

// Close stops the server, closing client connections. It is idempotent.
func (e *Emulator) Close() {
	e.srv.CloseClientConnections()
	e.srv.Close()
}

// URL is the endpoint to give the SDK as BaseEndpoint
// ("http://127.0.0.1:port").
func (e *Emulator) URL() string { return e.srv.URL }

// Region is the region the emulator serves.
func (e *Emulator) Region() string { return e.opts.Region }

// AvailabilityZone is the zone instances are placed in.
func (e *Emulator) AvailabilityZone() string { return e.opts.AvailabilityZone }

// Config returns an aws.Config for the emulator's region with static
// dummy credentials. It carries no endpoint: pass BaseEndpoint as in
// Client, or use the emulator URL however the provider takes endpoints.
func (e *Emulator) Config() aws.Config {
	return aws.Config{
		Region:      e.opts.Region,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEC2EMU", "ec2emu-secret", ""),
	}
}

// Client returns a real SDK EC2 client talking to the emulator, with the
// SDK's default (standard) retryer unless optFns change it.
func (e *Emulator) Client(optFns ...func(*ec2.Options)) *ec2.Client {
	fns := append([]func(*ec2.Options){func(o *ec2.Options) { o.BaseEndpoint = aws.String(e.srv.URL) }}, optFns...)
	return ec2.NewFromConfig(e.Config(), fns...)
}

// AddSecurityGroup registers a security group and returns it with its id
// and VPC filled in. Once any group is registered RunInstances rejects
// unknown groups with InvalidGroup.NotFound; with none registered any id or
// name is accepted.
func (e *Emulator) AddSecurityGroup(g SecurityGroup) SecurityGroup {
	e.mu.Lock()
	defer e.mu.Unlock()
	if g.ID == "" {
		g.ID = e.newID("sg-")
	}
	if g.VpcID == "" {
		g.VpcID = e.opts.VpcID
	}
	if g.Description == "" {
		g.Description = g.Name
	}
	e.groups = append(e.groups, g)
	return g
}

// RemoveSecurityGroup forgets the security group named name (as an
// operator's DeleteSecurityGroup would); reports whether there was one.
// Instances launched in it keep its id. Once the last group is removed
// RunInstances accepts any group again (see AddSecurityGroup): a test of
// a missing group keeps another one registered.
func (e *Emulator) RemoveSecurityGroup(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.groups {
		if e.groups[i].Name == name {
			e.groups = append(e.groups[:i], e.groups[i+1:]...)
			return true
		}
	}
	return false
}

// AddLaunchTemplate registers a launch template and returns it with its id
// filled in. Once any template is registered RunInstances rejects unknown
// ones (InvalidLaunchTemplateId.NotFound,
// InvalidLaunchTemplateName.NotFoundException) and unknown versions
// (InvalidLaunchTemplateId.VersionNotFound); with none registered any
// template is accepted.
func (e *Emulator) AddLaunchTemplate(t LaunchTemplate) LaunchTemplate {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.ID == "" {
		t.ID = e.newID("lt-")
	}
	if t.Versions <= 0 {
		t.Versions = 1
	}
	e.templates = append(e.templates, t)
	return t
}

// InjectFault queues faults for the next calls of action (one fault per
// call, in order): such a call does nothing and answers the fault. Faults
// queued for the same action accumulate. An SDK retry is a call, so a
// fault the SDK retries consumes one queue entry per attempt.
func (e *Emulator) InjectFault(action string, faults ...Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults[action] = append(e.faults[action], faults...)
}

// InjectLostResponse queues faults for the next calls of action that are
// not rejected by InjectFault or validation: such a call takes effect
// (RunInstances creates its instances, TerminateInstances terminates) but
// answers the fault instead of the result — a lost response. Use
// Fault{Drop: true} to lose the answer on the wire, or e.g.
// Fault{Code: CodeInternalError} for a server error after the fact.
//
// Note that the SDK retries both (with the same ClientToken, so a
// RunInstances retry finds the instance already created); queue at least
// as many faults as the client makes attempts for the call to fail.
func (e *Emulator) InjectLostResponse(action string, faults ...Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lost[action] = append(e.lost[action], faults...)
}

// PendingFaults returns how many injected faults of action are still
// queued: InjectFault's and InjectLostResponse's.
func (e *Emulator) PendingFaults(action string) (faults, lost int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.faults[action]), len(e.lost[action])
}

// ClearFaults drops all queued faults of every action.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = map[string][]Fault{}
	e.lost = map[string][]Fault{}
}

// Calls returns how many requests named action reached the emulator
// (faulted and failed ones included; each SDK retry attempt is one).
func (e *Emulator) Calls(action string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[action]
}

// CallCounts returns a copy of the request count of every action seen.
// Unknown actions are counted too.
func (e *Emulator) CallCounts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := make(map[string]int, len(e.calls))
	for k, v := range e.calls {
		m[k] = v
	}
	return m
}

// ResetCalls sets every call count to zero.
func (e *Emulator) ResetCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = map[string]int{}
}

// RunRequests returns every RunInstances request received, oldest first.
func (e *Emulator) RunRequests() []RunRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]RunRequest, len(e.runRequests))
	for i, rr := range e.runRequests {
		out[i] = rr.clone()
	}
	return out
}

// LastRunRequest returns the latest RunInstances request, and false if
// there was none.
func (e *Emulator) LastRunRequest() (RunRequest, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.runRequests) == 0 {
		return RunRequest{}, false
	}
	return e.runRequests[len(e.runRequests)-1].clone(), true
}

func (rr RunRequest) clone() RunRequest {
	c := rr
	c.SecurityGroupIDs = append([]string(nil), rr.SecurityGroupIDs...)
	c.SecurityGroupNames = append([]string(nil), rr.SecurityGroupNames...)
	c.Tags = copyMap(rr.Tags)
	c.TagsByResource = make(map[string]map[string]string, len(rr.TagsByResource))
	for k, v := range rr.TagsByResource {
		c.TagsByResource[k] = copyMap(v)
	}
	c.Form = make(map[string][]string, len(rr.Form))
	for k, v := range rr.Form {
		c.Form[k] = append([]string(nil), v...)
	}
	return c
}

func copyMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Instances returns a snapshot of every instance, terminated ones included,
// in launch order, with due timed transitions applied.
func (e *Emulator) Instances() []Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Instance, 0, len(e.instances))
	for _, in := range e.instances {
		e.advance(in)
		out = append(out, in.snapshot())
	}
	return out
}

// Instance returns a snapshot of one instance, and false if id is unknown.
func (e *Emulator) Instance(id string) (Instance, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.byID[id]
	if !ok {
		return Instance{}, false
	}
	e.advance(in)
	return in.snapshot(), true
}

// SetState moves instance id to state (one of the State constants) now,
// whatever its current state. Timed transitions continue from there: a
// pending instance becomes running after Options.PendingFor unless it
// never runs, a shutting-down one terminated after
// Options.ShuttingDownFor. Moving an instance to running also clears its
// NeverRunning mark. Errors: unknown id or state.
func (e *Emulator) SetState(id, state string) error {
	if _, ok := stateCodes[state]; !ok {
		return fmt.Errorf("ec2emu: unknown state %q", state)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.byID[id]
	if !ok {
		return fmt.Errorf("ec2emu: unknown instance %q", id)
	}
	if state == StateRunning {
		in.NeverRunning = false
	}
	e.setState(in, state)
	return nil
}

// SetNeverRunning sets whether instances launched from now on stay pending
// until SetState (Options.NeverRunning at start). It does not affect
// instances already launched.
func (e *Emulator) SetNeverRunning(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.neverRunning = on
}

// SetNoCapacity makes every RunInstances into zone (the requested
// Placement.AvailabilityZone, else Options.AvailabilityZone) fail with
// InsufficientInstanceCapacity while on, as a zone that has run out of an
// instance type does; other zones are unaffected. Unlike InjectFault it
// lasts until turned off and depends on the request.
func (e *Emulator) SetNoCapacity(zone string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.noCapacity == nil {
		e.noCapacity = map[string]bool{}
	}
	e.noCapacity[zone] = on
}

// SetTag sets an instance tag, as if another actor had changed it.
// Errors: unknown id.
func (e *Emulator) SetTag(id, key, value string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.byID[id]
	if !ok {
		return fmt.Errorf("ec2emu: unknown instance %q", id)
	}
	in.Tags[key] = value
	return nil
}

// RemoveTag deletes an instance tag (no error if it is absent), as if
// another actor had removed it. Errors: unknown id.
func (e *Emulator) RemoveTag(id, key string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.byID[id]
	if !ok {
		return fmt.Errorf("ec2emu: unknown instance %q", id)
	}
	delete(in.Tags, key)
	return nil
}

// --- internal state helpers (e.mu held) ---

func (e *Emulator) now() time.Time { return e.opts.Now() }

func (e *Emulator) newID(prefix string) string {
	// 17 random hex digits like modern EC2 ids, so ids from different
	// emulators (regions) never collide.
	var b [9]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])[:17]
}

func (e *Emulator) setState(in *instance, state string) {
	in.State = state
	in.StateSince = e.now()
}

// advance applies the timed transitions that are due.
func (e *Emulator) advance(in *instance) {
	now := e.now()
	if in.State == StatePending && !in.NeverRunning && !now.Before(in.StateSince.Add(e.opts.PendingFor)) {
		at := in.StateSince.Add(e.opts.PendingFor)
		e.setState(in, StateRunning)
		in.StateSince = at
	}
	if in.State == StateShuttingDown && !now.Before(in.StateSince.Add(e.opts.ShuttingDownFor)) {
		at := in.StateSince.Add(e.opts.ShuttingDownFor)
		e.setState(in, StateTerminated)
		in.StateSince = at
	}
}

func (in *instance) snapshot() Instance {
	s := in.Instance
	s.Tags = copyMap(in.Tags)
	s.SecurityGroupIDs = append([]string(nil), in.SecurityGroupIDs...)
	return s
}

// hostAddress renders an address template for host number h.
func hostAddress(template string, h int) string {
	if !strings.Contains(template, "%d") {
		return template
	}
	return fmt.Sprintf(template, h)
}

// dnsLabel turns 127.0.0.10 into 127-0-0-10.
func dnsLabel(ip string) string { return strings.ReplaceAll(ip, ".", "-") }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func atoiDefault(s string, def int) int {
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
