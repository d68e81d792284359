package providers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// OCIConfig configures the OCI provider.
type OCIConfig struct {
	// Provider is the SDK's configuration provider: the tenancy, user,
	// key, fingerprint and region every request is signed with and sent
	// to. Build it with common.DefaultConfigProvider (the DEFAULT profile
	// of ~/.oci/config or of the file OCI_CONFIG_FILE names, then TF_VAR_*
	// environment variables), common.CustomProfileConfigProvider(path,
	// profile) or common.ConfigurationProviderFromFileWithProfile(path,
	// profile, passphrase) for a standard OCI config file, or
	// auth.InstancePrincipalConfigurationProvider (package
	// github.com/oracle/oci-go-sdk/v65/common/auth) for instance
	// principals on an OCI instance. Required. Its region selects the
	// endpoints unless Endpoint is set.
	Provider common.ConfigurationProvider
	// CompartmentID is the OCID of the compartment instances are launched
	// into and listed in (images are listed there too: platform images
	// are listed for every compartment). Required.
	CompartmentID string
	// Endpoint overrides the endpoint of both the compute and the virtual
	// network client (tests; OCI-compatible clouds): the full
	// "http(s)://host[:port]", without a path (the SDK adds the API
	// version, /20160918). Empty: the SDK's endpoints for the provider's
	// region.
	Endpoint string
	// HTTPClient, when not nil, replaces the SDK's HTTP dispatcher of both
	// clients (tests; proxies; custom TLS). Nil: the SDK's own.
	HTTPClient common.HTTPRequestDispatcher
	// Health receives the outcome of every call, by availability domain;
	// nil: a default tracker (NewHealth(0, 0, nil, nil)).
	Health *Health
	// Logger logs retries; nil: no logs.
	Logger *slog.Logger
	// ShapeOCPUs is the number of OCPUs of instances of flexible shapes
	// (names ending ".Flex"); 0: no shapeConfig is sent, which OCI refuses
	// for flexible shapes (ErrRejected). Ignored for fixed shapes.
	ShapeOCPUs float32
	// ShapeMemoryGB is the memory of instances of flexible shapes, in GB;
	// 0: OCI's default for the shape and OCPU count. Used only when
	// ShapeOCPUs is set.
	ShapeMemoryGB float32
	// ImageOperatingSystem and ImageOperatingSystemVersion, when set,
	// restrict the images Launch chooses from (ListImages's
	// operatingSystem and operatingSystemVersion, e.g. "Canonical Ubuntu",
	// "24.04"). Empty: any operating system but Windows.
	ImageOperatingSystem        string
	ImageOperatingSystemVersion string
}

// OCI is the Oracle Cloud Infrastructure provider (Core Services compute
// and virtual network). Create it with NewOCI; safe for concurrent use.
//
// Locations are availability domains ("Uocm:PHX-AD-1"); one OCI serves
// the one region of its configuration provider (or Endpoint).
type OCI struct {
	cfg     OCIConfig
	health  *Health
	log     *slog.Logger
	compute core.ComputeClient
	network core.VirtualNetworkClient

	mu     sync.Mutex
	images map[imageKey]cachedImage
}

var _ Provider = (*OCI)(nil)

// imageKey is what an image choice depends on.
type imageKey struct {
	shape, arch string
}

type cachedImage struct {
	id string
	at time.Time
}

// imageCacheTTL is how long Launch reuses an image choice. Keeping the
// choice keeps a relaunch's body (and so its opc-retry-token) the same and
// saves the ListImages pages of every launch.
const imageCacheTTL = 30 * time.Minute

// NewOCI returns the OCI provider for cfg. It fails if cfg.Provider or
// cfg.CompartmentID is missing, if the SDK refuses the configuration
// provider (no region, key or tenancy), or if Endpoint is not an
// http(s)://host[:port] URL.
func NewOCI(cfg OCIConfig) (*OCI, error) {
	if cfg.Provider == nil {
		return nil, errors.New("oci: no configuration provider")
	}
	if cfg.CompartmentID == "" {
		return nil, errors.New("oci: no compartment id")
	}
	if cfg.Endpoint != "" {
		ep, err := checkEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		cfg.Endpoint = ep
	}
	compute, err := core.NewComputeClientWithConfigurationProvider(cfg.Provider)
	if err != nil {
		return nil, fmt.Errorf("oci: compute client: %w", err)
	}
	network, err := core.NewVirtualNetworkClientWithConfigurationProvider(cfg.Provider)
	if err != nil {
		return nil, fmt.Errorf("oci: virtual network client: %w", err)
	}
	h := cfg.Health
	if h == nil {
		h = NewHealth(0, 0, nil, nil)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &OCI{cfg: cfg, health: h, log: log.With("provider", "oci"), compute: compute, network: network, images: map[imageKey]cachedImage{}}
	o.configure(&o.compute.BaseClient)
	o.configure(&o.network.BaseClient)
	return o, nil
}

// checkEndpoint validates an Endpoint and returns it without a trailing
// slash.
func checkEndpoint(ep string) (string, error) {
	u, err := url.Parse(ep)
	if err != nil {
		return "", fmt.Errorf("oci: endpoint %q: %w", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("oci: endpoint %q is not http(s)://host[:port]", ep)
	}
	return u.Scheme + "://" + u.Host, nil
}

// configure applies the configuration to an SDK client: Endpoint and
// HTTPClient, no client-wide retries (each request says NoRetryPolicy
// too; the provider retries itself) and no SDK circuit breaker (Health
// does that job). Call it again after a SetRegion, which resets Host.
func (o *OCI) configure(c *common.BaseClient) {
	if o.cfg.Endpoint != "" {
		c.Host = o.cfg.Endpoint
	}
	if o.cfg.HTTPClient != nil {
		c.HTTPClient = o.cfg.HTTPClient
	}
	noRetry := common.NoRetryPolicy()
	c.Configuration.RetryPolicy = &noRetry
	c.Configuration.CircuitBreaker = nil
}

// Kind implements Provider.
func (o *OCI) Kind() managerpb.NodeProvider { return managerpb.NodeProvider_NODE_PROVIDER_OCI }

// Health implements Provider.
func (o *OCI) Health() *Health { return o.health }

// noRetry is the RequestMetadata of every request: the SDK issues it once
// (its DefaultRetryPolicy, which ListImages uses by default, would retry
// "Out of host capacity" and throttling on its own schedule).
func noRetry() common.RequestMetadata {
	p := common.NoRetryPolicy()
	return common.RequestMetadata{RetryPolicy: &p}
}

// isOutOfCapacity reports whether err is OCI's "Out of host capacity"
// answer (500 InternalError, recognisable only by its message).
func isOutOfCapacity(se common.ServiceError) bool {
	return se.GetHTTPStatusCode() == http.StatusInternalServerError &&
		strings.Contains(strings.ToLower(se.GetMessage()), "out of host capacity")
}

// classifyOCI maps an OCI call's error to a Health outcome and whether a
// retry can help.
func classifyOCI(err error) (Outcome, bool) {
	if err == nil {
		return OK, false
	}
	var se common.ServiceError
	if errors.As(err, &se) {
		status, code := se.GetHTTPStatusCode(), se.GetCode()
		switch {
		case status == http.StatusTooManyRequests:
			return Throttled, true
		case isOutOfCapacity(se), code == "LimitExceeded", code == "QuotaExceeded":
			return NoCapacity, false
		case status == http.StatusNotImplemented:
			return OK, false
		case status >= 500:
			return Outage, true
		default:
			return OK, false // a request error: the cloud is healthy
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OK, false
	}
	// Network errors, and errors of the signer (an instance principal's
	// token refresh, which the SDK flattens into plain errors).
	return Outage, true
}

// ociCallError is a failed call: a compact message for node status and
// logs (the SDK's own is many lines long) that unwraps to the SDK's error.
type ociCallError struct {
	op  string
	err error
}

// Error implements error.
func (e *ociCallError) Error() string {
	var se common.ServiceError
	if errors.As(e.err, &se) {
		return fmt.Sprintf("OCI %s: %d %s: %s (opc-request-id %s)", e.op, se.GetHTTPStatusCode(), se.GetCode(), se.GetMessage(), se.GetOpcRequestID())
	}
	return fmt.Sprintf("OCI %s: %v", e.op, e.err)
}

// Unwrap returns the SDK's error.
func (e *ociCallError) Unwrap() error { return e.err }

// call runs f with retries on throttling and transient errors (Backoff)
// until ctx ends, recording each attempt's outcome in ad's health (not
// that of an attempt cut short by ctx). Its error is an *ociCallError.
func (o *OCI) call(ctx context.Context, ad, op string, f func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		if err == nil {
			o.health.Record(ad, OK)
			return nil
		}
		err = &ociCallError{op: op, err: err}
		if ctx.Err() != nil {
			return err
		}
		out, retry := classifyOCI(err)
		o.health.Record(ad, out)
		if !retry {
			return err
		}
		d := Backoff(attempt)
		o.log.Warn("cloud call failed; retrying", "call", op, "availability_domain", ad, "in", d, "error", err)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		}
	}
}

// wrapOCI wraps the error of a call that cannot succeed with ErrCapacity
// or ErrRejected.
func wrapOCI(err error) error {
	if err == nil {
		return nil
	}
	out, retry := classifyOCI(err)
	if out == NoCapacity {
		return fmt.Errorf("%w: %w", ErrCapacity, err)
	}
	var se common.ServiceError
	if errors.As(err, &se) && !retry && se.GetHTTPStatusCode() >= 400 && se.GetHTTPStatusCode() < 500 {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

func isOCINotFound(err error) bool {
	var se common.ServiceError
	return errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusNotFound
}

// isOCIConflict reports a 409 answer; with code "Conflict" only when
// code is not empty.
func isOCIConflict(err error, code string) bool {
	var se common.ServiceError
	return errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusConflict && (code == "" || se.GetCode() == code)
}

// Architectures, as images and requests are matched on them.
const (
	archX86 = "x86_64"
	archArm = "aarch64"
)

// normalizeArch maps a request's architecture to archX86 or archArm; ""
// stays "" (any). ok is false for an unknown one.
func normalizeArch(a string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(a)) {
	case "":
		return "", true
	case "x86_64", "x86-64", "amd64", "x64", "x86":
		return archX86, true
	case "aarch64", "arm64", "arm":
		return archArm, true
	}
	return "", false
}

// imageArch returns an image's architecture. OCI images have no such
// field: a freeform tag "architecture" says it, else the display name
// (OCI names only its non-x86 platform images by architecture, e.g.
// "Oracle-Linux-9.4-aarch64-2024.09.30-0"); otherwise it is x86_64.
func imageArch(img core.Image) string {
	for k, v := range img.FreeformTags {
		if strings.EqualFold(k, "architecture") {
			if a, ok := normalizeArch(v); ok && a != "" {
				return a
			}
		}
	}
	name := strings.ToLower(deref(img.DisplayName))
	if strings.Contains(name, "aarch64") || strings.Contains(name, "arm64") {
		return archArm
	}
	return archX86
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// image returns the image Launch boots for shape and arch (normalised; ""
// is any): the newest available image of the compartment listed for the
// shape whose architecture is arch (and whose operating system is the
// configured one, or not Windows). No image: ErrRejected naming arch and
// shape.
func (o *OCI) image(ctx context.Context, ad, shape, arch string) (string, error) {
	key := imageKey{shape: shape, arch: arch}
	o.mu.Lock()
	c, ok := o.images[key]
	o.mu.Unlock()
	if ok && time.Since(c.at) < imageCacheTTL {
		return c.id, nil
	}

	req := core.ListImagesRequest{
		CompartmentId:   common.String(o.cfg.CompartmentID),
		Shape:           common.String(shape),
		LifecycleState:  core.ImageLifecycleStateAvailable,
		SortBy:          core.ListImagesSortByTimecreated,
		SortOrder:       core.ListImagesSortOrderDesc,
		RequestMetadata: noRetry(),
	}
	if v := o.cfg.ImageOperatingSystem; v != "" {
		req.OperatingSystem = common.String(v)
	}
	if v := o.cfg.ImageOperatingSystemVersion; v != "" {
		req.OperatingSystemVersion = common.String(v)
	}
	var best *core.Image
	listed := 0
	for {
		var resp core.ListImagesResponse
		err := o.call(ctx, ad, "ListImages", func(ctx context.Context) error {
			var err error
			resp, err = o.compute.ListImages(ctx, req)
			return err
		})
		if err != nil {
			return "", fmt.Errorf("choose an image for shape %s: %w", shape, wrapOCI(err))
		}
		for i := range resp.Items {
			img := resp.Items[i]
			listed++
			if img.Id == nil || (arch != "" && imageArch(img) != arch) {
				continue
			}
			if o.cfg.ImageOperatingSystem == "" && strings.Contains(strings.ToLower(deref(img.OperatingSystem)), "windows") {
				continue
			}
			if best == nil || newerImage(img, *best) {
				best = &img
			}
		}
		if resp.OpcNextPage == nil || *resp.OpcNextPage == "" {
			break
		}
		req.Page = resp.OpcNextPage
	}
	if best == nil {
		what := "an"
		if arch != "" {
			what = "an " + arch
		}
		if o.cfg.ImageOperatingSystem != "" {
			what += " " + strings.TrimSpace(o.cfg.ImageOperatingSystem+" "+o.cfg.ImageOperatingSystemVersion)
		}
		return "", fmt.Errorf("%w: no %s image for shape %s in compartment %s (%d images listed for the shape)",
			ErrRejected, what, shape, o.cfg.CompartmentID, listed)
	}
	o.mu.Lock()
	o.images[key] = cachedImage{id: *best.Id, at: time.Now()}
	o.mu.Unlock()
	o.log.Debug("chose image", "shape", shape, "architecture", arch, "image", *best.Id, "name", deref(best.DisplayName))
	return *best.Id, nil
}

// newerImage orders images by creation time, then by display name (the
// later build), so that the choice is deterministic.
func newerImage(a, b core.Image) bool {
	var ta, tb time.Time
	if a.TimeCreated != nil {
		ta = a.TimeCreated.Time
	}
	if b.TimeCreated != nil {
		tb = b.TimeCreated.Time
	}
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	return deref(a.DisplayName) > deref(b.DisplayName)
}

func (o *OCI) forgetImage(shape, arch string) {
	o.mu.Lock()
	delete(o.images, imageKey{shape: shape, arch: arch})
	o.mu.Unlock()
}

// retryTokenSafe matches node ids usable in a retry token as they are.
var retryTokenSafe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,56}$`)

// ociRetryToken is the opc-retry-token of a node's launch (OCI allows 64
// characters): the launch token, or its hash when it is long or unusual.
func ociRetryToken(token string) string {
	if retryTokenSafe.MatchString(token) {
		return "norsk-n-" + token
	}
	sum := sha256.Sum256([]byte(token))
	return "norsk-h-" + hex.EncodeToString(sum[:20])
}

// ociDisplayName is the display name of a node's instance.
func ociDisplayName(nodeID string) string { return "norsk-" + nodeID }

// Launch implements Provider: LaunchInstance in the request's availability
// domain and the configured compartment, with the request's shape (and,
// for a flexible shape, the configured OCPUs and memory), a primary VNIC
// in the request's subnet, the newest image of the compartment for the
// shape and architecture ("x86_64", "aarch64"/"arm64"; empty: any), the
// user data as metadata user_data, the node's tags plus NodeIDTag as
// freeform tags and display name "norsk-<node id>". The opc-retry-token is
// derived from the node id, so that a relaunch (within OCI's 24 hours)
// returns the instance of the first.
//
// Errors: ErrRejected for a request without availability domain, shape
// or subnet, an unknown architecture, no fitting image, or a 4xx answer
// (bad parameters, not found, not authenticated); ErrCapacity for "Out of
// host capacity" and LimitExceeded/QuotaExceeded, not retried. Throttling,
// 5xx and network errors are retried until ctx ends. A launch whose
// answer was lost may have created the instance: Find finds it.
func (o *OCI) Launch(ctx context.Context, spec LaunchSpec) (Instance, error) {
	req := spec.OCI
	if req == nil {
		return Instance{}, fmt.Errorf("%w: not an OCI launch", ErrRejected)
	}
	ad, shape, subnet := req.GetAvailabilityDomain(), req.GetShape(), req.GetSubnet()
	switch {
	case spec.NodeID == "":
		return Instance{}, fmt.Errorf("%w: no node id", ErrRejected)
	case ad == "":
		return Instance{}, fmt.Errorf("%w: no availability domain", ErrRejected)
	case shape == "":
		return Instance{}, fmt.Errorf("%w: no shape", ErrRejected)
	case subnet == "":
		return Instance{}, fmt.Errorf("%w: no subnet", ErrRejected)
	}
	arch, ok := normalizeArch(req.GetArchitecture())
	if !ok {
		return Instance{}, fmt.Errorf("%w: unknown architecture %q (x86_64, aarch64 or arm64)", ErrRejected, req.GetArchitecture())
	}
	imageID, err := o.image(ctx, ad, shape, arch)
	if err != nil {
		return Instance{}, err
	}

	details := core.LaunchInstanceDetails{
		AvailabilityDomain: common.String(ad),
		CompartmentId:      common.String(o.cfg.CompartmentID),
		DisplayName:        common.String(ociDisplayName(spec.NodeID)),
		Shape:              common.String(shape),
		SourceDetails:      core.InstanceSourceViaImageDetails{ImageId: common.String(imageID)},
		CreateVnicDetails:  &core.CreateVnicDetails{SubnetId: common.String(subnet)},
		FreeformTags:       ociTags(spec.NodeID, spec.Tags),
	}
	if strings.HasSuffix(shape, ".Flex") && o.cfg.ShapeOCPUs > 0 {
		sc := &core.LaunchInstanceShapeConfigDetails{Ocpus: common.Float32(o.cfg.ShapeOCPUs)}
		if o.cfg.ShapeMemoryGB > 0 {
			sc.MemoryInGBs = common.Float32(o.cfg.ShapeMemoryGB)
		}
		details.ShapeConfig = sc
	}
	if spec.UserData != "" {
		details.Metadata = map[string]string{"user_data": base64.StdEncoding.EncodeToString([]byte(spec.UserData))}
	}
	launch := core.LaunchInstanceRequest{
		LaunchInstanceDetails: details,
		OpcRetryToken:         common.String(ociRetryToken(launchToken(spec))),
		RequestMetadata:       noRetry(),
	}
	var resp core.LaunchInstanceResponse
	err = o.call(ctx, ad, "LaunchInstance", func(ctx context.Context) error {
		var err error
		resp, err = o.compute.LaunchInstance(ctx, launch)
		return err
	})
	if isOCIConflict(err, "Conflict") {
		// The retry token was used with another body (a newer image, other
		// user data): the node's instance exists, or existed.
		if inst, found, ferr := o.Find(ctx, ad, spec.NodeID); ferr == nil && found {
			return inst, nil
		}
	}
	if err != nil {
		if out, _ := classifyOCI(err); out == OK {
			o.forgetImage(shape, arch) // the image may be gone
		}
		return Instance{}, fmt.Errorf("launch %s (%s) in %s: %w", shape, req.GetArchitecture(), ad, wrapOCI(err))
	}
	o.health.Record(ad, Launched)
	return ociInstance(ad, resp.Instance), nil
}

// ociTags are the freeform tags of a node's instance: its tags and
// NodeIDTag.
func ociTags(nodeID string, tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags)+1)
	for k, v := range tags {
		out[k] = v
	}
	out[NodeIDTag] = nodeID
	return out
}

// ociState maps an instance's lifecycle state.
func ociState(s core.InstanceLifecycleStateEnum) State {
	switch s {
	case core.InstanceLifecycleStateProvisioning, core.InstanceLifecycleStateStarting:
		return Pending
	case core.InstanceLifecycleStateRunning:
		return Running
	}
	return Gone
}

// ociInstance converts an instance, without addresses.
func ociInstance(ad string, i core.Instance) Instance {
	id := deref(i.Id)
	return Instance{
		ID:       id,
		Location: ad,
		State:    ociState(i.LifecycleState),
		Running: &commonpb.RunningNodeMetadata{
			ProviderMetadata: &commonpb.RunningNodeProviderMetadata{Instance: &commonpb.RunningNodeProviderMetadata_Oci{Oci: &commonpb.RunningOciMetadata{InstanceId: id}}},
		},
	}
}

// Find implements Provider: ListInstances of the compartment in the
// availability domain (every page), the instances whose freeform tag
// NodeIDTag is nodeID, skipping TERMINATING and TERMINATED ones. Of
// several, a pending or running one wins, then the newest. An instance
// that is stopped (or stopping, moving …) is returned with State Gone,
// so that the caller can terminate it. Addresses are not filled in
// (Describe does that).
func (o *OCI) Find(ctx context.Context, ad, nodeID string) (Instance, bool, error) {
	req := core.ListInstancesRequest{
		CompartmentId:      common.String(o.cfg.CompartmentID),
		AvailabilityDomain: common.String(ad),
		SortBy:             core.ListInstancesSortByTimecreated,
		SortOrder:          core.ListInstancesSortOrderDesc,
		RequestMetadata:    noRetry(),
	}
	var found []core.Instance
	for {
		var resp core.ListInstancesResponse
		err := o.call(ctx, ad, "ListInstances", func(ctx context.Context) error {
			var err error
			resp, err = o.compute.ListInstances(ctx, req)
			return err
		})
		if err != nil {
			return Instance{}, false, fmt.Errorf("find the instance of node %s in %s: %w", nodeID, ad, wrapOCI(err))
		}
		for _, i := range resp.Items {
			if v, ok := i.FreeformTags[NodeIDTag]; !ok || v != nodeID {
				continue
			}
			if i.LifecycleState == core.InstanceLifecycleStateTerminating || i.LifecycleState == core.InstanceLifecycleStateTerminated {
				continue
			}
			found = append(found, i)
		}
		if resp.OpcNextPage == nil || *resp.OpcNextPage == "" {
			break
		}
		req.Page = resp.OpcNextPage
	}
	if len(found) == 0 {
		return Instance{}, false, nil
	}
	sort.SliceStable(found, func(a, b int) bool {
		la, lb := ociState(found[a].LifecycleState) != Gone, ociState(found[b].LifecycleState) != Gone
		if la != lb {
			return la
		}
		var ta, tb time.Time
		if found[a].TimeCreated != nil {
			ta = found[a].TimeCreated.Time
		}
		if found[b].TimeCreated != nil {
			tb = found[b].TimeCreated.Time
		}
		return ta.After(tb)
	})
	return ociInstance(ad, found[0]), true, nil
}

// Describe implements Provider: GetInstance (404: ErrNotFound) and, for a
// running instance, its primary VNIC's private and public IP and
// hostname label (as the private DNS name) from ListVnicAttachments and
// GetVnic. A running instance whose primary VNIC is not attached yet is
// reported Pending.
func (o *OCI) Describe(ctx context.Context, ad, id string) (Instance, error) {
	var resp core.GetInstanceResponse
	err := o.call(ctx, ad, "GetInstance", func(ctx context.Context) error {
		var err error
		resp, err = o.compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(id), RequestMetadata: noRetry()})
		return err
	})
	if isOCINotFound(err) {
		return Instance{}, fmt.Errorf("%w: %s in %s: %w", ErrNotFound, id, ad, err)
	}
	if err != nil {
		return Instance{}, fmt.Errorf("describe %s in %s: %w", id, ad, wrapOCI(err))
	}
	inst := ociInstance(ad, resp.Instance)
	if inst.State != Running {
		return inst, nil
	}
	compartment := deref(resp.CompartmentId)
	if compartment == "" {
		compartment = o.cfg.CompartmentID
	}
	vnic, err := o.primaryVnic(ctx, ad, compartment, id)
	if err != nil {
		return Instance{}, fmt.Errorf("describe %s in %s: %w", id, ad, err)
	}
	if vnic == nil {
		inst.State = Pending
		return inst, nil
	}
	inst.Running.PrivateIpAddress = deref(vnic.PrivateIp)
	inst.Running.PublicIpAddress = deref(vnic.PublicIp)
	inst.Running.PrivateDnsName = deref(vnic.HostnameLabel)
	return inst, nil
}

// primaryVnic returns the instance's attached primary VNIC (or, if none
// says it is primary, the first attached one); nil if none is attached
// yet.
func (o *OCI) primaryVnic(ctx context.Context, ad, compartment, instanceID string) (*core.Vnic, error) {
	req := core.ListVnicAttachmentsRequest{
		CompartmentId:   common.String(compartment),
		InstanceId:      common.String(instanceID),
		RequestMetadata: noRetry(),
	}
	var vnicIDs []string
	for {
		var resp core.ListVnicAttachmentsResponse
		err := o.call(ctx, ad, "ListVnicAttachments", func(ctx context.Context) error {
			var err error
			resp, err = o.compute.ListVnicAttachments(ctx, req)
			return err
		})
		if err != nil {
			return nil, wrapOCI(err)
		}
		for _, a := range resp.Items {
			if a.LifecycleState == core.VnicAttachmentLifecycleStateAttached && deref(a.VnicId) != "" {
				vnicIDs = append(vnicIDs, *a.VnicId)
			}
		}
		if resp.OpcNextPage == nil || *resp.OpcNextPage == "" {
			break
		}
		req.Page = resp.OpcNextPage
	}
	var first *core.Vnic
	for _, vid := range vnicIDs {
		var resp core.GetVnicResponse
		err := o.call(ctx, ad, "GetVnic", func(ctx context.Context) error {
			var err error
			resp, err = o.network.GetVnic(ctx, core.GetVnicRequest{VnicId: common.String(vid), RequestMetadata: noRetry()})
			return err
		})
		if isOCINotFound(err) {
			continue // detached meanwhile
		}
		if err != nil {
			return nil, wrapOCI(err)
		}
		v := resp.Vnic
		if v.IsPrimary != nil && *v.IsPrimary {
			return &v, nil
		}
		if first == nil {
			first = &v
		}
	}
	return first, nil
}

// Terminate implements Provider: TerminateInstance (the boot volume is
// deleted with it). An instance OCI does not know (404) is not an error;
// nor is one already terminating or terminated (should OCI answer 409
// for it, GetInstance decides).
func (o *OCI) Terminate(ctx context.Context, ad, id string) error {
	err := o.call(ctx, ad, "TerminateInstance", func(ctx context.Context) error {
		_, err := o.compute.TerminateInstance(ctx, core.TerminateInstanceRequest{InstanceId: common.String(id), RequestMetadata: noRetry()})
		return err
	})
	if err == nil || isOCINotFound(err) {
		return nil
	}
	if isOCIConflict(err, "") {
		var resp core.GetInstanceResponse
		gerr := o.call(ctx, ad, "GetInstance", func(ctx context.Context) error {
			var err error
			resp, err = o.compute.GetInstance(ctx, core.GetInstanceRequest{InstanceId: common.String(id), RequestMetadata: noRetry()})
			return err
		})
		if isOCINotFound(gerr) || (gerr == nil && (resp.LifecycleState == core.InstanceLifecycleStateTerminating ||
			resp.LifecycleState == core.InstanceLifecycleStateTerminated)) {
			return nil
		}
	}
	return fmt.Errorf("terminate %s in %s: %w", id, ad, wrapOCI(err))
}
