package ociemu

import (
	"bufio"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Operation names an API operation, as the SDK names it (the operation
// name in its errors).
type Operation string

// The operations the emulator serves.
const (
	// OpLaunchInstance is POST /20160918/instances (ComputeClient).
	OpLaunchInstance Operation = "LaunchInstance"
	// OpGetInstance is GET /20160918/instances/{id} (ComputeClient).
	OpGetInstance Operation = "GetInstance"
	// OpListInstances is GET /20160918/instances (ComputeClient).
	OpListInstances Operation = "ListInstances"
	// OpTerminateInstance is DELETE /20160918/instances/{id}
	// (ComputeClient).
	OpTerminateInstance Operation = "TerminateInstance"
	// OpListVnicAttachments is GET /20160918/vnicAttachments
	// (ComputeClient).
	OpListVnicAttachments Operation = "ListVnicAttachments"
	// OpGetVnic is GET /20160918/vnics/{id} (VirtualNetworkClient).
	OpGetVnic Operation = "GetVnic"
	// OpListImages is GET /20160918/images (ComputeClient).
	OpListImages Operation = "ListImages"
	// OpGetImage is GET /20160918/images/{id} (ComputeClient).
	OpGetImage Operation = "GetImage"
)

// APIVersion is the Core Services API version, the first element of every
// path (the SDK clients' BasePath).
const APIVersion = "20160918"

// Never, as Options.RunningAfter or Options.TerminatedAfter, means that the
// transition happens only when a test asks for it (Run, SetLifecycleState).
const Never time.Duration = -1

// Defaults of Options.
const (
	// DefaultTenancy is the tenancy OCID of the generated API key.
	DefaultTenancy = "ocid1.tenancy.oc1..emutenancy"
	// DefaultUser is the user OCID of the generated API key.
	DefaultUser = "ocid1.user.oc1..emuuser"
	// DefaultRegion is the region instances report and the configuration
	// provider names (an identifier the SDK knows, so that it does not
	// look for region metadata elsewhere).
	DefaultRegion = "us-ashburn-1"
	// DefaultCompartment is a compartment OCID for tests to use; the
	// emulator accepts any compartment.
	DefaultCompartment = "ocid1.compartment.oc1..emucompartment"
	// DefaultSubnet is a subnet OCID for tests to use; without
	// Options.Subnets any "ocid1.subnet." OCID is accepted.
	DefaultSubnet = "ocid1.subnet.oc1.emu.emusubnet"
	// DefaultPrivateIPTemplate is the default Options.PrivateIPTemplate.
	DefaultPrivateIPTemplate = "127.0.1.%d"
	// DefaultPublicIPTemplate is the default Options.PublicIPTemplate.
	DefaultPublicIPTemplate = "127.0.2.%d"
	// DefaultMaxClockSkew is how far a request's date may be from the
	// real clock, as for OCI (5 minutes).
	DefaultMaxClockSkew = 5 * time.Minute
	// MaxMetadataBytes is OCI's limit on the total size of an instance's
	// metadata values, user_data (base64) included.
	MaxMetadataBytes = 32000
	// MaxRetryTokenLength is OCI's limit on opc-retry-token.
	MaxRetryTokenLength = 64
)

// DefaultAvailabilityDomains are the availability domains of the emulator
// unless Options.AvailabilityDomains says otherwise.
var DefaultAvailabilityDomains = []string{"EMU:TEST-AD-1", "EMU:TEST-AD-2", "EMU:TEST-AD-3"}

// Options configure a Server. The zero value is usable.
type Options struct {
	// Key is the API key the emulator trusts (TrustKey adds more). Nil
	// makes a fresh one for DefaultTenancy/DefaultUser.
	Key *APIKey
	// Region is reported as the instances' region and used by
	// ConfigurationProvider; default DefaultRegion.
	Region string
	// AvailabilityDomains are the ADs LaunchInstance accepts (400
	// InvalidParameter for others); default DefaultAvailabilityDomains.
	AvailabilityDomains []string
	// Images is the image catalogue; nil means DefaultImages().
	Images []Image
	// Subnets, when not empty, are the only subnets that exist (404
	// NotAuthorizedOrNotFound for others); when empty any OCID starting
	// "ocid1.subnet." is accepted.
	Subnets []string
	// PrivateIPTemplate makes the private IP of the n-th instance
	// launched (n = 1, 2, …) with fmt.Sprintf(PrivateIPTemplate, n);
	// default DefaultPrivateIPTemplate. createVnicDetails.privateIp,
	// when given, wins.
	PrivateIPTemplate string
	// PublicIPTemplate does the same for public IPs (assigned unless
	// createVnicDetails.assignPublicIp is false); default
	// DefaultPublicIPTemplate.
	PublicIPTemplate string
	// RunningAfter is how long a launched instance stays PROVISIONING.
	// Zero: the launch answer says PROVISIONING and every later read says
	// RUNNING. Never: it stays PROVISIONING until Run.
	RunningAfter time.Duration
	// TerminatedAfter is how long a terminated instance stays
	// TERMINATING; zero and Never as for RunningAfter.
	TerminatedAfter time.Duration
	// PageSize, when positive, caps every list page (as the limit query
	// parameter does), so that callers must follow opc-next-page.
	PageSize int
	// MaxClockSkew is the accepted distance between a request's date and
	// the real clock (not Now); default DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Now is the emulator's clock for instance times and state
	// transitions (signature dates are checked against the real clock);
	// default time.Now.
	Now func() time.Time
}

// Server is an emulator of the part of the OCI Core Services API (version
// 20160918) that a compute node provider needs: instances, VNIC
// attachments, VNICs and images, served over plain HTTP on 127.0.0.1 and
// driven by the real oci-go-sdk clients. Every request must carry a valid
// OCI HTTP signature. It is safe for concurrent use.
type Server struct {
	srv  *httptest.Server
	opts Options
	key  *APIKey

	mu           sync.Mutex
	keys         map[string]*rsa.PublicKey // keyId → public key
	images       []Image
	instances    map[string]*instance
	order        []*instance // in launch order
	seq          int
	tokens       map[string]retryEntry
	calls        map[Operation]int
	injected     map[Operation][]APIError
	lose         []*APIError // lost launch responses; nil drops the connection
	neverRun     int
	launches     []LaunchRecord
	authFailures []string
	requests     []Request
}

type instance struct {
	Instance
	seq           int
	runScheduled  bool
	runAt         time.Time
	termScheduled bool
	termAt        time.Time
	hostname      string
}

type retryEntry struct {
	bodyHash   [32]byte
	instanceID string
}

// New starts an emulator on a free port of 127.0.0.1; it is shut down
// when the test ends. Failures fail t.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Key == nil {
		k, err := NewAPIKey(DefaultTenancy, DefaultUser)
		if err != nil {
			t.Fatalf("ociemu: %v", err)
		}
		opts.Key = k
	}
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if len(opts.AvailabilityDomains) == 0 {
		opts.AvailabilityDomains = slices.Clone(DefaultAvailabilityDomains)
	}
	if opts.Images == nil {
		opts.Images = DefaultImages()
	}
	if opts.PrivateIPTemplate == "" {
		opts.PrivateIPTemplate = DefaultPrivateIPTemplate
	}
	if opts.PublicIPTemplate == "" {
		opts.PublicIPTemplate = DefaultPublicIPTemplate
	}
	for _, tmpl := range []string{opts.PrivateIPTemplate, opts.PublicIPTemplate} {
		if strings.Count(tmpl, "%d") != 1 || net.ParseIP(fmt.Sprintf(tmpl, 1)) == nil {
			t.Fatalf("ociemu: IP template %q needs exactly one %%d and must make an IP address", tmpl)
		}
	}
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = DefaultMaxClockSkew
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{
		opts:      opts,
		key:       opts.Key,
		keys:      map[string]*rsa.PublicKey{opts.Key.KeyID(): &opts.Key.PrivateKey.PublicKey},
		images:    slices.Clone(opts.Images),
		instances: map[string]*instance{},
		tokens:    map[string]retryEntry{},
		calls:     map[Operation]int{},
		injected:  map[Operation][]APIError{},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("ociemu: %v", err)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.srv.Listener.Close()
	s.srv.Listener = lis
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// URL returns the emulator's base URL, "http://127.0.0.1:<port>": the Host
// to give an SDK client (see ConfigureClient).
func (s *Server) URL() string { return s.srv.URL }

// Host returns "127.0.0.1:<port>", the value of the signed host header.
func (s *Server) Host() string { return s.srv.Listener.Addr().String() }

// Close shuts the emulator down before the end of the test (New arranges
// it for the end anyway).
func (s *Server) Close() { s.srv.Close() }

// Key returns the API key the emulator was started with.
func (s *Server) Key() *APIKey { return s.key }

// Region returns the emulator's region.
func (s *Server) Region() string { return s.opts.Region }

// AvailabilityDomains returns the availability domains LaunchInstance
// accepts.
func (s *Server) AvailabilityDomains() []string { return slices.Clone(s.opts.AvailabilityDomains) }

// TrustKey makes the emulator accept signatures of pub under keyID
// ("tenancy/user/fingerprint").
func (s *Server) TrustKey(keyID string, pub *rsa.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[keyID] = pub
}

// InjectErrors queues errs for op: each of the next len(errs) calls of op
// (authenticated ones) is answered with the next error, before the
// emulator looks at the request, so nothing changes. Queues add up.
func (s *Server) InjectErrors(op Operation, errs ...APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected[op] = append(s.injected[op], errs...)
}

// FailNext makes the next n calls of op fail with e (see InjectErrors).
func (s *Server) FailNext(op Operation, n int, e APIError) {
	errs := make([]APIError, n)
	for i := range errs {
		errs[i] = e
	}
	s.InjectErrors(op, errs...)
}

// Calls returns how many authenticated calls of op the emulator received,
// those answered with an injected error included.
func (s *Server) Calls(op Operation) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// AuthFailures returns why each rejected (401) request was rejected, in
// order.
func (s *Server) AuthFailures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.authFailures)
}

// Requests returns every request answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// LastLaunch returns the last authenticated LaunchInstance call; false if
// there was none.
func (s *Server) LastLaunch() (LaunchRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.launches) == 0 {
		return LaunchRecord{}, false
	}
	return s.launches[len(s.launches)-1], true
}

// Launches returns every authenticated LaunchInstance call, in order.
func (s *Server) Launches() []LaunchRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.launches)
}

// LoseLaunchResponses makes the next n successful LaunchInstance calls
// create (or, for a known retry token, find) the instance and then fail
// the answer: with e, or, when e is nil, by closing the connection without
// an answer (the SDK returns a network error). A caller that does not
// reuse its opc-retry-token has to find the instance by its tags.
func (s *Server) LoseLaunchResponses(n int, e *APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		if e == nil {
			s.lose = append(s.lose, nil)
		} else {
			c := *e
			s.lose = append(s.lose, &c)
		}
	}
}

// NeverRunning makes the next n instances created stay PROVISIONING
// whatever Options.RunningAfter says (until Run or SetLifecycleState).
func (s *Server) NeverRunning(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.neverRun += n
}

// Run moves a PROVISIONING instance to RUNNING now.
func (s *Server) Run(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil {
		return fmt.Errorf("ociemu: no instance %s", id)
	}
	s.advance(in, s.opts.Now())
	if in.State != Provisioning {
		return fmt.Errorf("ociemu: instance %s is %s, not PROVISIONING", id, in.State)
	}
	in.State, in.runScheduled = Running, false
	return nil
}

// SetLifecycleState puts an instance into state (one of OCI's instance
// lifecycle states) and cancels pending automatic transitions, e.g. to
// make an instance fail during provisioning (TERMINATED) or stop.
func (s *Server) SetLifecycleState(id, state string) error {
	if !instanceStates[state] {
		return fmt.Errorf("ociemu: %q is not an instance lifecycle state", state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil {
		return fmt.Errorf("ociemu: no instance %s", id)
	}
	in.State, in.runScheduled, in.termScheduled = state, false, false
	return nil
}

// Purge forgets an instance, its VNIC and its attachment, as OCI does some
// time after termination: later calls naming it get 404.
func (s *Server) Purge(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil {
		return fmt.Errorf("ociemu: no instance %s", id)
	}
	delete(s.instances, id)
	s.order = slices.DeleteFunc(s.order, func(o *instance) bool { return o == in })
	return nil
}

// Instances returns all instances the emulator knows, in launch order,
// with their current states.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	out := make([]Instance, 0, len(s.order))
	for _, in := range s.order {
		s.advance(in, now)
		out = append(out, in.snapshot())
	}
	return out
}

// Instance returns one instance; false if the emulator does not know it.
func (s *Server) Instance(id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil {
		return Instance{}, false
	}
	s.advance(in, s.opts.Now())
	return in.snapshot(), true
}

// InstancesTagged returns the instances whose freeform tag key is value,
// in launch order.
func (s *Server) InstancesTagged(key, value string) []Instance {
	var out []Instance
	for _, in := range s.Instances() {
		if v, ok := in.FreeformTags[key]; ok && v == value {
			out = append(out, in)
		}
	}
	return out
}

// Images returns the image catalogue.
func (s *Server) Images() []Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.images)
}

// AddImage adds an image to the catalogue (an empty ID is made from the
// display name, a zero TimeCreated is the emulator's now).
func (s *Server) AddImage(img Image) {
	if img.ID == "" {
		img.ID = ImageID(img.DisplayName)
	}
	if img.TimeCreated.IsZero() {
		img.TimeCreated = s.opts.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images = append(s.images, img)
}

func (in *instance) snapshot() Instance {
	c := in.Instance
	c.FreeformTags = cloneMap(in.FreeformTags)
	c.Metadata = cloneMap(in.Metadata)
	c.UserData = slices.Clone(in.UserData)
	return c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// advance applies the timed transitions due by now. Called with s.mu held.
func (s *Server) advance(in *instance, now time.Time) {
	if in.State == Provisioning && in.runScheduled && !now.Before(in.runAt) {
		in.State, in.runScheduled = Running, false
	}
	if in.State == Terminating && in.termScheduled && !now.Before(in.termAt) {
		in.State, in.termScheduled = Terminated, false
	}
}

// HTTP plumbing.

const maxBody = 1 << 20

type recorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the status and sends it.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and sends b.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Hijack lets a lost response close the connection.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("ociemu: connection cannot be hijacked")
	}
	return hj.Hijack()
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

func writeError(w http.ResponseWriter, e APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": e.Code, "message": e.Message})
}

func writeJSON(w http.ResponseWriter, status int, v any, etag bool) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, ErrInternal.With(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if etag {
		sum := sha256.Sum256(b)
		w.Header().Set("etag", hex.EncodeToString(sum[:16]))
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type handler func(w *recorder, r *http.Request, id string, body []byte, now time.Time)

// route maps a method and a path below /20160918 to its operation.
func (s *Server) route(method, path string) (Operation, handler, string) {
	rest, ok := strings.CutPrefix(path, "/"+APIVersion+"/")
	if !ok {
		return "", nil, ""
	}
	parts := strings.Split(rest, "/")
	id := ""
	if len(parts) == 2 && parts[1] != "" {
		id = parts[1]
	} else if len(parts) != 1 {
		return "", nil, ""
	}
	switch {
	case parts[0] == "instances" && id == "" && method == http.MethodPost:
		return OpLaunchInstance, s.launchInstance, ""
	case parts[0] == "instances" && id == "" && method == http.MethodGet:
		return OpListInstances, s.listInstances, ""
	case parts[0] == "instances" && id != "" && method == http.MethodGet:
		return OpGetInstance, s.getInstance, id
	case parts[0] == "instances" && id != "" && method == http.MethodDelete:
		return OpTerminateInstance, s.terminateInstance, id
	case parts[0] == "vnicAttachments" && id == "" && method == http.MethodGet:
		return OpListVnicAttachments, s.listVnicAttachments, ""
	case parts[0] == "vnics" && id != "" && method == http.MethodGet:
		return OpGetVnic, s.getVnic, id
	case parts[0] == "images" && id == "" && method == http.MethodGet:
		return OpListImages, s.listImages, ""
	case parts[0] == "images" && id != "" && method == http.MethodGet:
		return OpGetImage, s.getImage, id
	}
	return "", nil, ""
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w}
	reqID := newRequestID()
	if c := r.Header.Get("opc-request-id"); c != "" {
		reqID = c + "/" + reqID
	}
	w.Header().Set("opc-request-id", reqID)
	entry := Request{Method: r.Method, RequestURI: r.RequestURI}
	defer func() {
		entry.Status = rec.status
		s.mu.Lock()
		s.requests = append(s.requests, entry)
		s.mu.Unlock()
	}()

	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(rec, ErrCannotParseRequest.With("cannot read the body: "+err.Error()))
		return
	}
	if len(body) > maxBody {
		writeError(rec, ErrInvalidParameter.With("the body exceeds 1 MiB"))
		return
	}
	// Signatures are checked against the real clock: the SDK dates its
	// requests with time.Now whatever Options.Now says.
	keyID, err := s.verify(r, body, time.Now())
	entry.KeyID = keyID
	if err != nil {
		s.mu.Lock()
		s.authFailures = append(s.authFailures, fmt.Sprintf("%s %s: %v", r.Method, r.RequestURI, err))
		s.mu.Unlock()
		writeError(rec, ErrNotAuthenticated)
		return
	}

	op, h, id := s.route(r.Method, r.URL.Path)
	entry.Operation = op
	if h == nil {
		writeError(rec, ErrNotFound.With(fmt.Sprintf("%s %s is not an operation of this API (or of the emulator)", r.Method, r.URL.Path)))
		return
	}
	s.mu.Lock()
	s.calls[op]++
	var injected *APIError
	if q := s.injected[op]; len(q) > 0 {
		e := q[0]
		s.injected[op] = q[1:]
		injected = &e
	}
	if injected != nil && op == OpLaunchInstance {
		lr := decodeLaunchRecord(body, r.Header.Get("opc-retry-token"))
		lr.Error = injected
		s.launches = append(s.launches, lr)
	}
	s.mu.Unlock()
	if injected != nil {
		writeError(rec, *injected)
		return
	}
	h(rec, r, id, body, s.opts.Now())
}

// decodeLaunchRecord decodes what it can of a LaunchInstance body.
func decodeLaunchRecord(body []byte, token string) LaunchRecord {
	lr := LaunchRecord{RetryToken: token, Body: slices.Clone(body)}
	var d wireLaunchDetails
	if json.Unmarshal(body, &d) != nil {
		return lr
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	lr.CompartmentID, lr.AvailabilityDomain = str(d.CompartmentID), str(d.AvailabilityDomain)
	lr.DisplayName, lr.Shape, lr.FaultDomain = str(d.DisplayName), str(d.Shape), str(d.FaultDomain)
	if d.ShapeConfig != nil {
		if d.ShapeConfig.Ocpus != nil {
			lr.OCPUs = *d.ShapeConfig.Ocpus
		}
		if d.ShapeConfig.MemoryInGBs != nil {
			lr.MemoryInGBs = *d.ShapeConfig.MemoryInGBs
		}
	}
	lr.ImageID = str(d.ImageID)
	if d.SourceDetails != nil {
		lr.SourceType = d.SourceDetails.SourceType
		if d.SourceDetails.ImageID != nil {
			lr.ImageID = *d.SourceDetails.ImageID
		}
	}
	lr.SubnetID = str(d.SubnetID)
	if v := d.CreateVnicDetails; v != nil {
		if v.SubnetID != nil {
			lr.SubnetID = *v.SubnetID
		}
		lr.AssignPublicIP = v.AssignPublicIP
	}
	lr.Metadata = d.Metadata
	if ud, ok := d.Metadata["user_data"]; ok {
		if b, err := base64.StdEncoding.DecodeString(ud); err == nil {
			lr.UserData = b
		}
	}
	lr.FreeformTags = d.FreeformTags
	return lr
}

// Instances.

func (s *Server) imageFor(id, compartment string) *Image {
	for i := range s.images {
		if im := &s.images[i]; im.ID == id && (im.CompartmentID == "" || im.CompartmentID == compartment) {
			return im
		}
	}
	return nil
}

// validateLaunch checks a LaunchInstance body the way OCI would, for the
// parts the emulator models. Called with s.mu held.
func (s *Server) validateLaunch(d *wireLaunchDetails, lr *LaunchRecord) *APIError {
	fail := func(e APIError, format string, a ...any) *APIError {
		e.Message = fmt.Sprintf(format, a...)
		return &e
	}
	if lr.CompartmentID == "" {
		return fail(ErrMissingParameter, "compartmentId is required.")
	}
	if lr.AvailabilityDomain == "" {
		return fail(ErrMissingParameter, "availabilityDomain is required.")
	}
	if !slices.Contains(s.opts.AvailabilityDomains, lr.AvailabilityDomain) {
		return fail(ErrInvalidParameter, "Invalid availabilityDomain %q.", lr.AvailabilityDomain)
	}
	if lr.Shape == "" {
		return fail(ErrMissingParameter, "shape is required.")
	}
	if d.SourceDetails != nil && d.SourceDetails.SourceType != "image" {
		return fail(ErrInvalidParameter, "sourceDetails.sourceType %q is not supported by the emulator (only \"image\").", d.SourceDetails.SourceType)
	}
	if lr.ImageID == "" {
		return fail(ErrMissingParameter, "sourceDetails.imageId is required.")
	}
	img := s.imageFor(lr.ImageID, lr.CompartmentID)
	if img == nil {
		return fail(ErrNotFound, "Image %s not found or not authorized.", lr.ImageID)
	}
	if len(img.Shapes) > 0 && !slices.Contains(img.Shapes, lr.Shape) {
		return fail(ErrInvalidParameter, "Shape %s is not valid for image %s.", lr.Shape, lr.ImageID)
	}
	if strings.HasSuffix(lr.Shape, ".Flex") {
		if d.ShapeConfig == nil || d.ShapeConfig.Ocpus == nil {
			return fail(ErrInvalidParameter, "shapeConfig.ocpus is required for the flexible shape %s.", lr.Shape)
		}
	}
	if d.ShapeConfig != nil {
		if c := d.ShapeConfig; (c.Ocpus != nil && *c.Ocpus <= 0) || (c.MemoryInGBs != nil && *c.MemoryInGBs <= 0) {
			return fail(ErrInvalidParameter, "shapeConfig ocpus and memoryInGBs must be positive.")
		}
	}
	if lr.SubnetID == "" {
		return fail(ErrMissingParameter, "createVnicDetails.subnetId is required.")
	}
	if len(s.opts.Subnets) > 0 {
		if !slices.Contains(s.opts.Subnets, lr.SubnetID) {
			return fail(ErrNotFound, "Subnet %s not found or not authorized.", lr.SubnetID)
		}
	} else if !strings.HasPrefix(lr.SubnetID, "ocid1.subnet.") {
		return fail(ErrInvalidParameter, "Invalid subnetId %q.", lr.SubnetID)
	}
	if v := d.CreateVnicDetails; v != nil && v.PrivateIP != nil && net.ParseIP(*v.PrivateIP) == nil {
		return fail(ErrInvalidParameter, "Invalid createVnicDetails.privateIp %q.", *v.PrivateIP)
	}
	size := 0
	for k, v := range d.Metadata {
		size += len(k) + len(v)
	}
	if size > MaxMetadataBytes {
		return fail(ErrInvalidParameter, "The metadata exceeds %d bytes.", MaxMetadataBytes)
	}
	if ud, ok := d.Metadata["user_data"]; ok {
		if _, err := base64.StdEncoding.DecodeString(ud); err != nil {
			return fail(ErrInvalidParameter, "metadata.user_data is not base64.")
		}
	}
	if len(lr.RetryToken) > MaxRetryTokenLength {
		return fail(ErrInvalidParameter, "opc-retry-token is longer than %d characters.", MaxRetryTokenLength)
	}
	return nil
}

func (s *Server) launchInstance(w *recorder, r *http.Request, _ string, body []byte, now time.Time) {
	token := r.Header.Get("opc-retry-token")
	lr := decodeLaunchRecord(body, token)
	var d wireLaunchDetails

	s.mu.Lock()
	var apiErr *APIError
	var in *instance
	replay := false
	if err := json.Unmarshal(body, &d); err != nil {
		e := ErrCannotParseRequest.With("The request body is not valid JSON: " + err.Error())
		apiErr = &e
	} else if te, ok := s.tokens[token]; ok && token != "" {
		if te.bodyHash != sha256.Sum256(body) {
			e := ErrConflict.With("The opc-retry-token was used before with a different request.")
			apiErr = &e
		} else if in = s.instances[te.instanceID]; in == nil {
			e := ErrConflict.With("The resource created with this opc-retry-token no longer exists.")
			apiErr = &e
		} else {
			replay = true
		}
	} else {
		apiErr = s.validateLaunch(&d, &lr)
	}
	if apiErr == nil && !replay {
		in = s.create(&d, &lr, now)
		if token != "" {
			s.tokens[token] = retryEntry{bodyHash: sha256.Sum256(body), instanceID: in.ID}
		}
	}
	var lost *APIError
	dropConn := false
	if apiErr == nil {
		lr.InstanceID = in.ID
		if len(s.lose) > 0 {
			lost = s.lose[0]
			s.lose = s.lose[1:]
			if lost == nil {
				dropConn = true
			}
		}
	}
	var wire wireInstance
	if in != nil {
		if replay {
			s.advance(in, now)
		}
		wire = s.wireInstance(in)
	}
	switch {
	case apiErr != nil:
		lr.Error = apiErr
	case dropConn:
		lr.Error = &APIError{Code: "ConnectionClosed", Message: "the emulator closed the connection without an answer"}
	case lost != nil:
		lr.Error = lost
	}
	s.launches = append(s.launches, lr)
	s.mu.Unlock()

	switch {
	case apiErr != nil:
		writeError(w, *apiErr)
	case dropConn:
		conn, _, err := w.Hijack()
		if err != nil {
			writeError(w, ErrInternal.With(err.Error()))
			return
		}
		_ = conn.Close()
	case lost != nil:
		writeError(w, *lost)
	default:
		w.Header().Set("opc-work-request-id", "ocid1.coreservicesworkrequest.oc1.emu."+newRequestID())
		writeJSON(w, http.StatusOK, wire, true)
	}
}

// create makes a new instance from a validated launch. Called with s.mu
// held.
func (s *Server) create(d *wireLaunchDetails, lr *LaunchRecord, now time.Time) *instance {
	s.seq++
	n := s.seq
	suffix := strings.ToLower(newRequestID())
	ocpus, mem := lr.OCPUs, lr.MemoryInGBs
	if ocpus == 0 {
		ocpus = 1
	}
	if mem == 0 {
		perOCPU := 16.0
		if strings.Contains(lr.Shape, ".A1.") {
			perOCPU = 6
		}
		mem = ocpus * perOCPU
	}
	in := &instance{seq: n, Instance: Instance{
		ID:                 "ocid1.instance.oc1.emu." + suffix,
		CompartmentID:      lr.CompartmentID,
		AvailabilityDomain: lr.AvailabilityDomain,
		DisplayName:        lr.DisplayName,
		Shape:              lr.Shape,
		FaultDomain:        lr.FaultDomain,
		OCPUs:              ocpus,
		MemoryInGBs:        mem,
		ImageID:            lr.ImageID,
		SubnetID:           lr.SubnetID,
		State:              Provisioning,
		FreeformTags:       cloneMap(lr.FreeformTags),
		Metadata:           cloneMap(lr.Metadata),
		UserData:           slices.Clone(lr.UserData),
		VnicID:             "ocid1.vnic.oc1.emu." + suffix,
		VnicAttachmentID:   "ocid1.vnicattachment.oc1.emu." + suffix,
		PrivateIP:          fmt.Sprintf(s.opts.PrivateIPTemplate, n),
		RetryToken:         lr.RetryToken,
		TimeCreated:        now.UTC(),
	}}
	if in.DisplayName == "" {
		in.DisplayName = fmt.Sprintf("instance%s", now.UTC().Format("20060102150405"))
	}
	if in.FaultDomain == "" {
		in.FaultDomain = "FAULT-DOMAIN-1"
	}
	if in.FreeformTags == nil {
		in.FreeformTags = map[string]string{}
	}
	if v := d.CreateVnicDetails; v != nil {
		if v.PrivateIP != nil {
			in.PrivateIP = *v.PrivateIP
		}
		if v.HostnameLabel != nil {
			in.hostname = *v.HostnameLabel
		}
	}
	if lr.AssignPublicIP == nil || *lr.AssignPublicIP {
		in.PublicIP = fmt.Sprintf(s.opts.PublicIPTemplate, n)
	}
	switch {
	case s.neverRun > 0:
		s.neverRun--
	case s.opts.RunningAfter >= 0:
		in.runScheduled, in.runAt = true, now.Add(s.opts.RunningAfter)
	}
	s.instances[in.ID] = in
	s.order = append(s.order, in)
	return in
}

func (s *Server) wireInstance(in *instance) wireInstance {
	ocpus, mem := in.OCPUs, in.MemoryInGBs
	imageID := in.ImageID
	md := cloneMap(in.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	return wireInstance{
		AvailabilityDomain: in.AvailabilityDomain,
		CompartmentID:      in.CompartmentID,
		ID:                 in.ID,
		LifecycleState:     in.State,
		Region:             s.opts.Region,
		Shape:              in.Shape,
		TimeCreated:        formatTime(in.TimeCreated),
		DisplayName:        in.DisplayName,
		FaultDomain:        in.FaultDomain,
		FreeformTags:       cloneMap(in.FreeformTags),
		DefinedTags:        map[string]map[string]any{},
		ImageID:            imageID,
		LaunchMode:         "PARAVIRTUALIZED",
		Metadata:           md,
		ShapeConfig:        &wireShapeConfig{Ocpus: &ocpus, MemoryInGBs: &mem},
		SourceDetails:      &wireSourceDetails{SourceType: "image", ImageID: &imageID},
	}
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func (s *Server) lookup(id string, now time.Time) (*instance, *APIError) {
	in := s.instances[id]
	if in == nil {
		e := ErrNotFound
		return nil, &e
	}
	s.advance(in, now)
	return in, nil
}

func (s *Server) getInstance(w *recorder, _ *http.Request, id string, _ []byte, now time.Time) {
	s.mu.Lock()
	in, apiErr := s.lookup(id, now)
	var wire wireInstance
	if in != nil {
		wire = s.wireInstance(in)
	}
	s.mu.Unlock()
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	writeJSON(w, http.StatusOK, wire, true)
}

func (s *Server) terminateInstance(w *recorder, _ *http.Request, id string, _ []byte, now time.Time) {
	s.mu.Lock()
	in, apiErr := s.lookup(id, now)
	if in != nil && in.State != Terminating && in.State != Terminated {
		in.State, in.runScheduled, in.termScheduled = Terminating, false, false
		if s.opts.TerminatedAfter >= 0 {
			in.termScheduled, in.termAt = true, now.Add(s.opts.TerminatedAfter)
		}
	}
	s.mu.Unlock()
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	w.Header().Set("opc-work-request-id", "ocid1.coreservicesworkrequest.oc1.emu."+newRequestID())
	w.WriteHeader(http.StatusNoContent)
}

// Lists.

// required returns the value of a required query parameter.
func required(q url.Values, name string) (string, *APIError) {
	v := q.Get(name)
	if v == "" {
		e := ErrMissingParameter.With(name + " is required.")
		return "", &e
	}
	return v, nil
}

// page cuts n sorted items into the page the limit and page parameters ask
// for, setting opc-next-page when more follow.
func (s *Server) page(w http.ResponseWriter, q url.Values, n int) (int, int, *APIError) {
	start := 0
	if p := q.Get("page"); p != "" {
		v, err := strconv.Atoi(strings.TrimPrefix(p, "emu-page-"))
		if err != nil || !strings.HasPrefix(p, "emu-page-") || v < 0 {
			e := ErrInvalidParameter.With("Invalid page token.")
			return 0, 0, &e
		}
		start = min(v, n)
	}
	limit := 0
	if l := q.Get("limit"); l != "" {
		v, err := strconv.Atoi(l)
		if err != nil || v < 1 || v > 1000 {
			e := ErrInvalidParameter.With("limit must be between 1 and 1000.")
			return 0, 0, &e
		}
		limit = v
	}
	if s.opts.PageSize > 0 && (limit == 0 || s.opts.PageSize < limit) {
		limit = s.opts.PageSize
	}
	end := n
	if limit > 0 && start+limit < n {
		end = start + limit
		w.Header().Set("opc-next-page", "emu-page-"+strconv.Itoa(end))
	}
	return start, end, nil
}

// sortSpec reads sortBy/sortOrder: byName and descending.
func sortSpec(q url.Values) (bool, bool, *APIError) {
	byName := false
	switch q.Get("sortBy") {
	case "", "TIMECREATED":
	case "DISPLAYNAME":
		byName = true
	default:
		e := ErrInvalidParameter.With("sortBy must be TIMECREATED or DISPLAYNAME.")
		return false, false, &e
	}
	desc := !byName
	switch q.Get("sortOrder") {
	case "":
	case "ASC":
		desc = false
	case "DESC":
		desc = true
	default:
		e := ErrInvalidParameter.With("sortOrder must be ASC or DESC.")
		return false, false, &e
	}
	return byName, desc, nil
}

func (s *Server) listInstances(w *recorder, r *http.Request, _ string, _ []byte, now time.Time) {
	q := r.URL.Query()
	compartment, apiErr := required(q, "compartmentId")
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	state := q.Get("lifecycleState")
	if state != "" && !instanceStates[state] {
		writeError(w, ErrInvalidParameter.With(fmt.Sprintf("Invalid lifecycleState %q.", state)))
		return
	}
	byName, desc, apiErr := sortSpec(q)
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	s.mu.Lock()
	var sel []*instance
	for _, in := range s.order {
		s.advance(in, now)
		switch {
		case in.CompartmentID != compartment,
			q.Has("availabilityDomain") && in.AvailabilityDomain != q.Get("availabilityDomain"),
			q.Has("displayName") && in.DisplayName != q.Get("displayName"),
			state != "" && in.State != state:
			continue
		}
		sel = append(sel, in)
	}
	sort.SliceStable(sel, func(i, j int) bool {
		a, b := sel[i], sel[j]
		if desc {
			a, b = b, a
		}
		if byName && a.DisplayName != b.DisplayName {
			return a.DisplayName < b.DisplayName
		}
		if !a.TimeCreated.Equal(b.TimeCreated) {
			return a.TimeCreated.Before(b.TimeCreated)
		}
		return a.seq < b.seq
	})
	start, end, apiErr := s.page(w, q, len(sel))
	out := []wireInstance{}
	if apiErr == nil {
		for _, in := range sel[start:end] {
			out = append(out, s.wireInstance(in))
		}
	}
	s.mu.Unlock()
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	writeJSON(w, http.StatusOK, out, false)
}

func attachmentState(instanceState string) string {
	switch instanceState {
	case Provisioning:
		return "ATTACHING"
	case Terminating:
		return "DETACHING"
	case Terminated:
		return "DETACHED"
	}
	return "ATTACHED"
}

func vnicState(instanceState string) string {
	switch instanceState {
	case Provisioning:
		return "PROVISIONING"
	case Terminating:
		return "TERMINATING"
	case Terminated:
		return "TERMINATED"
	}
	return "AVAILABLE"
}

func (s *Server) listVnicAttachments(w *recorder, r *http.Request, _ string, _ []byte, now time.Time) {
	q := r.URL.Query()
	compartment, apiErr := required(q, "compartmentId")
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	s.mu.Lock()
	var sel []*instance
	for _, in := range s.order {
		s.advance(in, now)
		switch {
		case in.CompartmentID != compartment,
			q.Has("availabilityDomain") && in.AvailabilityDomain != q.Get("availabilityDomain"),
			q.Has("instanceId") && in.ID != q.Get("instanceId"),
			q.Has("vnicId") && in.VnicID != q.Get("vnicId"):
			continue
		}
		sel = append(sel, in)
	}
	start, end, apiErr := s.page(w, q, len(sel))
	out := []wireVnicAttachment{}
	if apiErr == nil {
		for _, in := range sel[start:end] {
			out = append(out, wireVnicAttachment{
				AvailabilityDomain: in.AvailabilityDomain,
				CompartmentID:      in.CompartmentID,
				ID:                 in.VnicAttachmentID,
				InstanceID:         in.ID,
				LifecycleState:     attachmentState(in.State),
				TimeCreated:        formatTime(in.TimeCreated),
				SubnetID:           in.SubnetID,
				VnicID:             in.VnicID,
			})
		}
	}
	s.mu.Unlock()
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	writeJSON(w, http.StatusOK, out, false)
}

func (s *Server) getVnic(w *recorder, _ *http.Request, id string, _ []byte, now time.Time) {
	s.mu.Lock()
	var wire *wireVnic
	for _, in := range s.order {
		if in.VnicID != id {
			continue
		}
		s.advance(in, now)
		wire = &wireVnic{
			AvailabilityDomain: in.AvailabilityDomain,
			CompartmentID:      in.CompartmentID,
			ID:                 in.VnicID,
			LifecycleState:     vnicState(in.State),
			TimeCreated:        formatTime(in.TimeCreated),
			DisplayName:        in.DisplayName,
			FreeformTags:       map[string]string{},
			DefinedTags:        map[string]map[string]any{},
			HostnameLabel:      in.hostname,
			IsPrimary:          true,
			MacAddress:         fmt.Sprintf("02:00:17:%02X:%02X:%02X", (in.seq>>16)&0xff, (in.seq>>8)&0xff, in.seq&0xff),
			PrivateIP:          in.PrivateIP,
			PublicIP:           in.PublicIP,
			SubnetID:           in.SubnetID,
		}
		break
	}
	s.mu.Unlock()
	if wire == nil {
		writeError(w, ErrNotFound)
		return
	}
	writeJSON(w, http.StatusOK, wire, true)
}

// Images.

func wireImageOf(im *Image) wireImage {
	var compartment *string
	if im.CompartmentID != "" {
		c := im.CompartmentID
		compartment = &c
	}
	tags := cloneMap(im.FreeformTags)
	if tags == nil {
		tags = map[string]string{}
	}
	return wireImage{
		CompartmentID:          compartment,
		CreateImageAllowed:     true,
		ID:                     im.ID,
		LifecycleState:         "AVAILABLE",
		OperatingSystem:        im.OperatingSystem,
		OperatingSystemVersion: im.OperatingSystemVersion,
		TimeCreated:            formatTime(im.TimeCreated),
		DisplayName:            im.DisplayName,
		FreeformTags:           tags,
		DefinedTags:            map[string]map[string]any{},
		LaunchMode:             "NATIVE",
		SizeInMBs:              47694,
	}
}

func (s *Server) listImages(w *recorder, r *http.Request, _ string, _ []byte, _ time.Time) {
	q := r.URL.Query()
	compartment, apiErr := required(q, "compartmentId")
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	if st := q.Get("lifecycleState"); st != "" && st != "AVAILABLE" && st != "PROVISIONING" && st != "IMPORTING" &&
		st != "EXPORTING" && st != "DISABLED" && st != "DELETED" {
		writeError(w, ErrInvalidParameter.With(fmt.Sprintf("Invalid lifecycleState %q.", st)))
		return
	}
	byName, desc, apiErr := sortSpec(q)
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	s.mu.Lock()
	var sel []Image
	for _, im := range s.images {
		switch {
		case im.CompartmentID != "" && im.CompartmentID != compartment,
			q.Has("displayName") && im.DisplayName != q.Get("displayName"),
			q.Has("operatingSystem") && im.OperatingSystem != q.Get("operatingSystem"),
			q.Has("operatingSystemVersion") && im.OperatingSystemVersion != q.Get("operatingSystemVersion"),
			q.Has("shape") && len(im.Shapes) > 0 && !slices.Contains(im.Shapes, q.Get("shape")),
			q.Has("lifecycleState") && q.Get("lifecycleState") != "AVAILABLE":
			continue
		}
		sel = append(sel, im)
	}
	s.mu.Unlock()
	sort.SliceStable(sel, func(i, j int) bool {
		a, b := sel[i], sel[j]
		if desc {
			a, b = b, a
		}
		if byName && a.DisplayName != b.DisplayName {
			return a.DisplayName < b.DisplayName
		}
		if !a.TimeCreated.Equal(b.TimeCreated) {
			return a.TimeCreated.Before(b.TimeCreated)
		}
		return a.DisplayName < b.DisplayName
	})
	start, end, apiErr := s.page(w, q, len(sel))
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	out := []wireImage{}
	for i := range sel[start:end] {
		out = append(out, wireImageOf(&sel[start+i]))
	}
	writeJSON(w, http.StatusOK, out, false)
}

func (s *Server) getImage(w *recorder, _ *http.Request, id string, _ []byte, _ time.Time) {
	s.mu.Lock()
	var wire *wireImage
	for i := range s.images {
		if s.images[i].ID == id {
			wi := wireImageOf(&s.images[i])
			wire = &wi
			break
		}
	}
	s.mu.Unlock()
	if wire == nil {
		writeError(w, ErrNotFound)
		return
	}
	writeJSON(w, http.StatusOK, wire, true)
}
