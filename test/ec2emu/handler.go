package ec2emu

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// apiError is an EC2 error answer.
type apiError struct {
	code    string
	message string
	status  int
}

func (a *apiError) Error() string { return a.code + ": " + a.message }

func errorf(code, format string, args ...any) *apiError {
	return &apiError{code: code, message: fmt.Sprintf(format, args...), status: StatusFor(code)}
}

func faultError(f Fault) *apiError {
	if f.Code == "" {
		f.Code = CodeInternalError
	}
	return &apiError{code: f.Code, message: f.message(), status: f.status()}
}

// serveHTTP answers one EC2 Query request.
func (e *Emulator) serveHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		writeError(w, reqID, &apiError{code: CodeInvalidAction, message: "method " + r.Method + " not allowed", status: http.StatusMethodNotAllowed})
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, reqID, errorf(CodeInvalidParameterValue, "malformed form: %v", err))
		return
	}
	form := r.Form
	action := form.Get("Action")

	e.mu.Lock()
	e.calls[action]++
	var run RunRequest
	if action == ActionRunInstances {
		run = parseRunRequest(form, r.Header.Get("Amz-Sdk-Request"))
		e.runRequests = append(e.runRequests, run)
	}
	e.mu.Unlock()

	if action == "" {
		writeError(w, reqID, errorf("MissingAction", "The request must contain the parameter Action"))
		return
	}
	if v := form.Get("Version"); v != APIVersion {
		writeError(w, reqID, errorf(CodeNoSuchVersion, "An invalid or unsupported API version %q was specified (want %s)", v, APIVersion))
		return
	}
	if aerr := e.checkAuth(r); aerr != nil {
		writeError(w, reqID, aerr)
		return
	}
	switch action {
	case ActionRunInstances, ActionDescribeInstances, ActionTerminateInstances, ActionDescribeSecurityGroups:
	default:
		writeError(w, reqID, errorf(CodeInvalidAction, "The action %s is not valid for this web service.", action))
		return
	}

	// An injected fault: the call does nothing.
	e.mu.Lock()
	f, faulted := pop(e.faults, action)
	e.mu.Unlock()
	if faulted {
		e.answerFault(w, r, reqID, f)
		return
	}

	e.mu.Lock()
	var body any
	var aerr *apiError
	switch action {
	case ActionRunInstances:
		body, aerr = e.runInstances(reqID, form, &run)
	case ActionDescribeInstances:
		body, aerr = e.describeInstances(reqID, form)
	case ActionTerminateInstances:
		body, aerr = e.terminateInstances(reqID, form)
	case ActionDescribeSecurityGroups:
		body, aerr = e.describeSecurityGroups(reqID, form)
	}
	var lost Fault
	var isLost bool
	if aerr == nil {
		lost, isLost = pop(e.lost, action)
	}
	e.mu.Unlock()

	switch {
	case aerr != nil:
		writeError(w, reqID, aerr)
	case isLost:
		e.answerFault(w, r, reqID, lost)
	default:
		writeXML(w, reqID, http.StatusOK, body)
	}
}

func pop(m map[string][]Fault, action string) (Fault, bool) {
	q := m[action]
	if len(q) == 0 {
		return Fault{}, false
	}
	m[action] = q[1:]
	return q[0], true
}

func (e *Emulator) answerFault(w http.ResponseWriter, r *http.Request, reqID string, f Fault) {
	sleepCtx(r.Context(), f.Delay)
	if f.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // aborts the response where hijacking is impossible
	}
	writeError(w, reqID, faultError(f))
}

// sigv4Scope matches the credential scope of a SigV4 Authorization header.
var sigv4Scope = regexp.MustCompile(`Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request`)

// checkAuth requires a SigV4 signature scoped to the emulator's region and
// the ec2 service. The signature itself is not verified.
func (e *Emulator) checkAuth(r *http.Request) *apiError {
	m := sigv4Scope.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return errorf(CodeAuthFailure, "AWS was not able to validate the provided access credentials (no SigV4 Authorization header)")
	}
	if m[1] != e.opts.Region {
		return errorf(CodeAuthFailure, "Credential should be scoped to a valid region: request signed for %q, this endpoint serves %q", m[1], e.opts.Region)
	}
	if m[2] != "ec2" {
		return errorf(CodeAuthFailure, "Credential should be scoped to correct service: 'ec2', not %q", m[2])
	}
	return nil
}

// --- form helpers ---

// list returns prefix.1, prefix.2, … until the first missing index.
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		k := prefix + "." + strconv.Itoa(i)
		if _, ok := form[k]; !ok {
			return out
		}
		out = append(out, form.Get(k))
	}
}

type filter struct {
	name   string
	values []string
}

func parseFilters(form url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		if _, ok := form[p+".Name"]; !ok {
			return out
		}
		out = append(out, filter{name: form.Get(p + ".Name"), values: list(form, p+".Value")})
	}
}

func parseTagSpecs(form url.Values) map[string]map[string]string {
	out := map[string]map[string]string{}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := form[p+".ResourceType"]
		if !ok {
			if _, any := form[p+".Tag.1.Key"]; !any {
				return out
			}
			rt = []string{""}
		}
		tags := out[rt[0]]
		if tags == nil {
			tags = map[string]string{}
			out[rt[0]] = tags
		}
		for j := 1; ; j++ {
			q := p + ".Tag." + strconv.Itoa(j)
			k, ok := form[q+".Key"]
			if !ok {
				break
			}
			tags[k[0]] = form.Get(q + ".Value")
		}
	}
}

func parseRunRequest(form url.Values, attempt string) RunRequest {
	rr := RunRequest{
		ClientToken:           form.Get("ClientToken"),
		ImageID:               form.Get("ImageId"),
		InstanceType:          form.Get("InstanceType"),
		MinCount:              atoiDefault(form.Get("MinCount"), 0),
		MaxCount:              atoiDefault(form.Get("MaxCount"), 0),
		LaunchTemplateID:      form.Get("LaunchTemplate.LaunchTemplateId"),
		LaunchTemplateName:    form.Get("LaunchTemplate.LaunchTemplateName"),
		LaunchTemplateVersion: form.Get("LaunchTemplate.Version"),
		SubnetID:              form.Get("SubnetId"),
		AvailabilityZone:      form.Get("Placement.AvailabilityZone"),
		SecurityGroupIDs:      list(form, "SecurityGroupId"),
		SecurityGroupNames:    list(form, "SecurityGroup"),
		UserDataBase64:        form.Get("UserData"),
		TagsByResource:        parseTagSpecs(form),
		DryRun:                strings.EqualFold(form.Get("DryRun"), "true"),
		Attempt:               attempt,
		Form:                  map[string][]string{},
	}
	if ud, err := base64.StdEncoding.DecodeString(rr.UserDataBase64); err == nil {
		rr.UserData = string(ud)
	}
	rr.Tags = map[string]string{}
	for k, v := range rr.TagsByResource["instance"] {
		rr.Tags[k] = v
	}
	for k, v := range form {
		rr.Form[k] = append([]string(nil), v...)
	}
	return rr
}

// --- RunInstances ---

func (e *Emulator) findTemplate(id, name string) (*LaunchTemplate, *apiError) {
	for i := range e.templates {
		t := &e.templates[i]
		if (id != "" && t.ID == id) || (id == "" && name != "" && t.Name == name) {
			return t, nil
		}
	}
	if id != "" {
		return nil, errorf(CodeInvalidLaunchTemplateIDNotFound, "The specified launch template, with template ID %s, does not exist.", id)
	}
	return nil, errorf(CodeInvalidLaunchTemplateNameNotFound, "The specified launch template, with template name %s, does not exist.", name)
}

func (e *Emulator) groupByID(id string) *SecurityGroup {
	for i := range e.groups {
		if e.groups[i].ID == id {
			return &e.groups[i]
		}
	}
	return nil
}

func (e *Emulator) groupByName(name string) *SecurityGroup {
	for i := range e.groups {
		if e.groups[i].Name == name {
			return &e.groups[i]
		}
	}
	return nil
}

func (e *Emulator) runInstances(reqID string, form url.Values, rr *RunRequest) (any, *apiError) {
	if form.Get("MinCount") == "" {
		return nil, errorf(CodeMissingParameter, "The request must contain the parameter MinCount")
	}
	if form.Get("MaxCount") == "" {
		return nil, errorf(CodeMissingParameter, "The request must contain the parameter MaxCount")
	}
	if rr.MinCount < 1 || rr.MaxCount < rr.MinCount {
		return nil, errorf(CodeInvalidParameterValue, "Invalid MinCount %q / MaxCount %q", form.Get("MinCount"), form.Get("MaxCount"))
	}
	if rr.UserDataBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(rr.UserDataBase64); err != nil {
			return nil, errorf(CodeInvalidParameterValue, "Invalid BASE64 encoding of user data.")
		}
	}
	if rr.LaunchTemplateID != "" && rr.LaunchTemplateName != "" {
		return nil, errorf(CodeInvalidParameterCombination, "Specify either a launch template ID or a launch template name, not both.")
	}
	usesTemplate := rr.LaunchTemplateID != "" || rr.LaunchTemplateName != ""
	var tmpl *LaunchTemplate
	if usesTemplate && len(e.templates) > 0 {
		t, aerr := e.findTemplate(rr.LaunchTemplateID, rr.LaunchTemplateName)
		if aerr != nil {
			return nil, aerr
		}
		switch v := rr.LaunchTemplateVersion; v {
		case "", "$Latest", "$Default":
		default:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > t.Versions {
				return nil, errorf(CodeInvalidLaunchTemplateVersion, "The specified launch template version %q does not exist for template %s.", v, t.ID)
			}
		}
		tmpl = t
	}
	imageID, instanceType := rr.ImageID, rr.InstanceType
	sgIDs := append([]string(nil), rr.SecurityGroupIDs...)
	tags := map[string]string{}
	if tmpl != nil {
		if imageID == "" {
			imageID = tmpl.ImageID
		}
		if instanceType == "" {
			instanceType = tmpl.InstanceType
		}
		if len(sgIDs) == 0 && len(rr.SecurityGroupNames) == 0 {
			sgIDs = append(sgIDs, tmpl.SecurityGroupIDs...)
		}
		for k, v := range tmpl.Tags {
			tags[k] = v
		}
	}
	if imageID == "" && !usesTemplate {
		return nil, errorf(CodeMissingParameter, "The request must contain the parameter ImageId")
	}
	if instanceType == "" {
		instanceType = e.opts.DefaultInstanceType
	}
	if len(e.groups) > 0 {
		for _, id := range sgIDs {
			if e.groupByID(id) == nil {
				return nil, errorf(CodeInvalidGroupNotFound, "The security group '%s' does not exist", id)
			}
		}
		for _, name := range rr.SecurityGroupNames {
			g := e.groupByName(name)
			if g == nil {
				return nil, errorf(CodeInvalidGroupNotFound, "The security group '%s' does not exist in default VPC '%s'", name, e.opts.VpcID)
			}
			sgIDs = append(sgIDs, g.ID)
		}
	}
	for k, v := range rr.Tags {
		tags[k] = v
	}

	fp := runFingerprint(rr)
	if rr.ClientToken != "" {
		if te, ok := e.tokens[rr.ClientToken]; ok {
			if te.fingerprint != fp {
				return nil, errorf(CodeIdempotentParameterMismatch, "The client token %s was used before with different parameters.", rr.ClientToken)
			}
			if rr.DryRun {
				return nil, errorf(CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
			}
			return e.reservationResponse("RunInstancesResponse", reqID, te.reservation, true), nil
		}
	}
	if rr.DryRun {
		return nil, errorf(CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
	}
	zone := rr.AvailabilityZone
	if zone == "" {
		zone = e.opts.AvailabilityZone
	}
	if e.noCapacity[zone] {
		return nil, errorf(CodeInsufficientInstanceCapacity, "We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", instanceType, zone)
	}

	hasHost := strings.Contains(e.opts.PrivateIPTemplate, "%d")
	if hasHost && e.opts.FirstHost+e.seq+rr.MaxCount-1 > 254 {
		return nil, errorf(CodeInsufficientFreeAddresses, "There are not enough free addresses in subnet to satisfy the requested number of instances.")
	}
	subnet := rr.SubnetID
	if subnet == "" {
		subnet = e.opts.SubnetID
	}
	resID := e.newID("r-")
	now := e.now()
	for i := 0; i < rr.MaxCount; i++ {
		host := e.opts.FirstHost + e.seq
		e.seq++
		in := &instance{Instance: Instance{
			ID:                    e.newID("i-"),
			ReservationID:         resID,
			ImageID:               imageID,
			InstanceType:          instanceType,
			State:                 StatePending,
			StateSince:            now,
			PrivateIP:             hostAddress(e.opts.PrivateIPTemplate, host),
			AvailabilityZone:      zone,
			SubnetID:              subnet,
			VpcID:                 e.opts.VpcID,
			SecurityGroupIDs:      append([]string(nil), sgIDs...),
			LaunchTime:            now,
			Tags:                  map[string]string{},
			ClientToken:           rr.ClientToken,
			LaunchTemplateID:      rr.LaunchTemplateID,
			LaunchTemplateName:    rr.LaunchTemplateName,
			LaunchTemplateVersion: rr.LaunchTemplateVersion,
			UserData:              rr.UserData,
			NeverRunning:          e.neverRunning,
		}}
		if tmpl != nil && in.LaunchTemplateID == "" {
			in.LaunchTemplateID = tmpl.ID
		}
		for k, v := range tags {
			in.Tags[k] = v
		}
		in.PrivateDNS = "ip-" + dnsLabel(in.PrivateIP) + "." + e.opts.Region + ".compute.internal"
		if e.opts.PublicIPTemplate != "" {
			in.PublicIP = hostAddress(e.opts.PublicIPTemplate, host)
			in.PublicDNS = "ec2-" + dnsLabel(in.PublicIP) + "." + e.opts.Region + "." + e.opts.DNSDomain
		}
		e.instances = append(e.instances, in)
		e.byID[in.ID] = in
		e.reservations[resID] = append(e.reservations[resID], in)
	}
	if rr.ClientToken != "" {
		e.tokens[rr.ClientToken] = tokenEntry{fingerprint: fp, reservation: resID}
	}
	// The RunInstances answer shows the instances as launched: pending,
	// even with PendingFor 0.
	return e.reservationResponse("RunInstancesResponse", reqID, resID, false), nil
}

// runFingerprint identifies the parameters of a RunInstances call for the
// ClientToken idempotency check (order-insensitive where EC2 is).
func runFingerprint(rr *RunRequest) string {
	sgIDs := append([]string(nil), rr.SecurityGroupIDs...)
	sort.Strings(sgIDs)
	sgNames := append([]string(nil), rr.SecurityGroupNames...)
	sort.Strings(sgNames)
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%d|%d|%s|%s|%s|%s|%v|%v|%s|", rr.ImageID, rr.InstanceType, rr.MinCount, rr.MaxCount,
		rr.LaunchTemplateID, rr.LaunchTemplateName, rr.LaunchTemplateVersion, rr.SubnetID, sgIDs, sgNames, rr.UserDataBase64)
	rts := make([]string, 0, len(rr.TagsByResource))
	for rt := range rr.TagsByResource {
		rts = append(rts, rt)
	}
	sort.Strings(rts)
	for _, rt := range rts {
		b.WriteString(rt + "{")
		for _, k := range sortedKeys(rr.TagsByResource[rt]) {
			b.WriteString(k + "=" + rr.TagsByResource[rt][k] + ";")
		}
		b.WriteString("}")
	}
	return b.String()
}

// reservationResponse renders a RunInstancesResponse for reservation resID,
// applying due transitions first if advance is set.
func (e *Emulator) reservationResponse(root, reqID, resID string, advance bool) *runInstancesResponse {
	ins := e.reservations[resID]
	r := &runInstancesResponse{RequestID: reqID}
	r.XMLName.Local = root
	r.xmlReservation = e.xmlReservation(resID, ins, advance)
	return r
}

func (e *Emulator) xmlReservation(resID string, ins []*instance, advance bool) xmlReservation {
	r := xmlReservation{ReservationID: resID, OwnerID: e.opts.OwnerID}
	for _, in := range ins {
		if advance {
			e.advance(in)
		}
		r.Instances = append(r.Instances, e.xmlInstance(in))
	}
	return r
}

func (e *Emulator) xmlInstance(in *instance) xmlInstance {
	code := stateCodes[in.State]
	x := xmlInstance{
		InstanceID:   in.ID,
		ImageID:      in.ImageID,
		State:        xmlState{Code: code, Name: in.State},
		InstanceType: in.InstanceType,
		LaunchTime:   in.LaunchTime.UTC().Format("2006-01-02T15:04:05.000Z"),
		Placement:    xmlPlacement{AvailabilityZone: in.AvailabilityZone, Tenancy: "default"},
		SubnetID:     in.SubnetID,
		VpcID:        in.VpcID,
		ClientToken:  in.ClientToken,
		Architecture: "x86_64",
	}
	if in.State != StateTerminated {
		x.PrivateIP = in.PrivateIP
		x.PrivateDNS = in.PrivateDNS
	}
	switch in.State {
	case StateRunning, StateShuttingDown, StateStopping:
		x.PublicIP = in.PublicIP
		x.PublicDNS = in.PublicDNS
	}
	for _, id := range in.SecurityGroupIDs {
		g := xmlGroup{GroupID: id}
		if sg := e.groupByID(id); sg != nil {
			g.GroupName = sg.Name
		}
		x.Groups = append(x.Groups, g)
	}
	for _, k := range sortedKeys(in.Tags) {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: in.Tags[k]})
	}
	return x
}

// --- DescribeInstances ---

var instanceIDPattern = regexp.MustCompile(`^i-[0-9a-f]{8}([0-9a-f]{9})?$`)

// lookupInstances resolves ids, failing like EC2 for malformed or unknown
// ones (all of them named in the message).
func (e *Emulator) lookupInstances(ids []string) ([]*instance, *apiError) {
	var out []*instance
	var missing []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return nil, errorf(CodeInvalidInstanceIDMalformed, "Invalid id: %q", id)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		in, ok := e.byID[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		out = append(out, in)
	}
	switch len(missing) {
	case 0:
		return out, nil
	case 1:
		return nil, errorf(CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", missing[0])
	default:
		return nil, errorf(CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
}

// instanceFilters are the DescribeInstances filter names the emulator
// knows, with the instance values each one matches.
var instanceFilters = map[string]func(e *Emulator, in *instance) []string{
	"instance-id":         func(_ *Emulator, in *instance) []string { return []string{in.ID} },
	"instance-state-name": func(_ *Emulator, in *instance) []string { return []string{in.State} },
	"instance-state-code": func(_ *Emulator, in *instance) []string { return []string{strconv.Itoa(stateCodes[in.State])} },
	"instance-type":       func(_ *Emulator, in *instance) []string { return []string{in.InstanceType} },
	"client-token":        func(_ *Emulator, in *instance) []string { return []string{in.ClientToken} },
	"availability-zone":   func(_ *Emulator, in *instance) []string { return []string{in.AvailabilityZone} },
	"subnet-id":           func(_ *Emulator, in *instance) []string { return []string{in.SubnetID} },
	"vpc-id":              func(_ *Emulator, in *instance) []string { return []string{in.VpcID} },
	"image-id":            func(_ *Emulator, in *instance) []string { return []string{in.ImageID} },
	"reservation-id":      func(_ *Emulator, in *instance) []string { return []string{in.ReservationID} },
	"instance.group-id":   func(_ *Emulator, in *instance) []string { return in.SecurityGroupIDs },
	"private-ip-address": func(e *Emulator, in *instance) []string {
		return nonEmpty(e.xmlInstance(in).PrivateIP)
	},
	"ip-address": func(e *Emulator, in *instance) []string {
		return nonEmpty(e.xmlInstance(in).PublicIP)
	},
	"private-dns-name": func(e *Emulator, in *instance) []string {
		return nonEmpty(e.xmlInstance(in).PrivateDNS)
	},
	"dns-name": func(e *Emulator, in *instance) []string {
		return nonEmpty(e.xmlInstance(in).PublicDNS)
	},
	"tag-key": func(_ *Emulator, in *instance) []string { return sortedKeys(in.Tags) },
	"tag-value": func(_ *Emulator, in *instance) []string {
		var vs []string
		for _, v := range in.Tags {
			vs = append(vs, v)
		}
		return vs
	},
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func (e *Emulator) filterValues(name string, in *instance) ([]string, bool) {
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		v, has := in.Tags[key]
		if !has {
			return nil, true
		}
		return []string{v}, true
	}
	fn, ok := instanceFilters[name]
	if !ok {
		return nil, false
	}
	return fn(e, in), true
}

func (e *Emulator) checkFilters(fs []filter, known func(string) bool) *apiError {
	for _, f := range fs {
		if !known(f.name) {
			return errorf(CodeInvalidParameterValue, "The filter '%s' is invalid", f.name)
		}
		if len(f.values) == 0 {
			return errorf(CodeInvalidParameterValue, "The filter '%s' has no values", f.name)
		}
	}
	return nil
}

// matches reports whether any of have matches any of the filter's values
// (with EC2's * and ? wildcards).
func matches(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if glob(w, h) {
				return true
			}
		}
	}
	return false
}

// glob matches s against pattern with * (any run) and ? (any one
// character); \ escapes the next character.
func glob(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	var match func(i, j int) bool
	memo := map[[2]int]bool{}
	match = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var r bool
		switch {
		case i == len(p):
			r = j == len(t)
		case p[i] == '*':
			r = match(i+1, j) || (j < len(t) && match(i, j+1))
		case p[i] == '?':
			r = j < len(t) && match(i+1, j+1)
		case p[i] == '\\' && i+1 < len(p):
			r = j < len(t) && t[j] == p[i+1] && match(i+2, j+1)
		default:
			r = j < len(t) && t[j] == p[i] && match(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return match(0, 0)
}

const nextTokenPrefix = "ec2emu-"

func (e *Emulator) describeInstances(reqID string, form url.Values) (any, *apiError) {
	ids := list(form, "InstanceId")
	fs := parseFilters(form)
	if aerr := e.checkFilters(fs, func(n string) bool {
		_, ok := instanceFilters[n]
		return ok || (strings.HasPrefix(n, "tag:") && len(n) > 4)
	}); aerr != nil {
		return nil, aerr
	}
	maxResults := 0
	if v := form.Get("MaxResults"); v != "" {
		if len(ids) > 0 {
			return nil, errorf(CodeInvalidParameterCombination, "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 || n > 1000 {
			return nil, errorf(CodeInvalidParameterValue, "Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", v)
		}
		maxResults = n
	}
	start := 0
	if tok := form.Get("NextToken"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, nextTokenPrefix))
		if !strings.HasPrefix(tok, nextTokenPrefix) || err != nil || n < 0 {
			return nil, errorf(CodeInvalidParameterValue, "The parameter NextToken is invalid: %q", tok)
		}
		start = n
	}

	candidates := e.instances
	if len(ids) > 0 {
		found, aerr := e.lookupInstances(ids)
		if aerr != nil {
			return nil, aerr
		}
		candidates = found
	}
	// Matching instances grouped by reservation, in launch order.
	var order []string
	byRes := map[string][]*instance{}
	for _, in := range candidates {
		e.advance(in)
		ok := true
		for _, f := range fs {
			have, _ := e.filterValues(f.name, in)
			if !matches(have, f.values) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if _, seen := byRes[in.ReservationID]; !seen {
			order = append(order, in.ReservationID)
		}
		byRes[in.ReservationID] = append(byRes[in.ReservationID], in)
	}
	resp := &describeInstancesResponse{RequestID: reqID}
	end := len(order)
	if start > end {
		start = end
	}
	if maxResults > 0 && start+maxResults < end {
		end = start + maxResults
		resp.NextToken = nextTokenPrefix + strconv.Itoa(end)
	}
	for _, resID := range order[start:end] {
		resp.Reservations = append(resp.Reservations, e.xmlReservation(resID, byRes[resID], false)) // advanced above
	}
	return resp, nil
}

// --- TerminateInstances ---

func (e *Emulator) terminateInstances(reqID string, form url.Values) (any, *apiError) {
	ids := list(form, "InstanceId")
	if len(ids) == 0 {
		return nil, errorf(CodeMissingParameter, "The request must contain the parameter InstanceId")
	}
	ins, aerr := e.lookupInstances(ids)
	if aerr != nil {
		return nil, aerr
	}
	if strings.EqualFold(form.Get("DryRun"), "true") {
		return nil, errorf(CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
	}
	resp := &terminateInstancesResponse{RequestID: reqID}
	for _, in := range ins {
		e.advance(in)
		prev := in.State
		switch in.State {
		case StatePending, StateRunning, StateStopping, StateStopped:
			e.setState(in, StateShuttingDown)
		}
		resp.Instances = append(resp.Instances, xmlStateChange{
			InstanceID:    in.ID,
			CurrentState:  xmlState{Code: stateCodes[in.State], Name: in.State},
			PreviousState: xmlState{Code: stateCodes[prev], Name: prev},
		})
	}
	return resp, nil
}

// --- DescribeSecurityGroups ---

var groupFilters = map[string]func(g *SecurityGroup) string{
	"group-name":  func(g *SecurityGroup) string { return g.Name },
	"group-id":    func(g *SecurityGroup) string { return g.ID },
	"vpc-id":      func(g *SecurityGroup) string { return g.VpcID },
	"description": func(g *SecurityGroup) string { return g.Description },
}

func (e *Emulator) describeSecurityGroups(reqID string, form url.Values) (any, *apiError) {
	ids := list(form, "GroupId")
	names := list(form, "GroupName")
	fs := parseFilters(form)
	if aerr := e.checkFilters(fs, func(n string) bool { _, ok := groupFilters[n]; return ok }); aerr != nil {
		return nil, aerr
	}
	for _, id := range ids {
		if e.groupByID(id) == nil {
			return nil, errorf(CodeInvalidGroupNotFound, "The security group '%s' does not exist", id)
		}
	}
	for _, n := range names {
		if e.groupByName(n) == nil {
			return nil, errorf(CodeInvalidGroupNotFound, "The security group '%s' does not exist in default VPC '%s'", n, e.opts.VpcID)
		}
	}
	resp := &describeSecurityGroupsResponse{RequestID: reqID}
	for i := range e.groups {
		g := &e.groups[i]
		if len(ids) > 0 && !contains(ids, g.ID) {
			continue
		}
		if len(names) > 0 && !contains(names, g.Name) {
			continue
		}
		ok := true
		for _, f := range fs {
			if !matches([]string{groupFilters[f.name](g)}, f.values) {
				ok = false
				break
			}
		}
		if ok {
			resp.Groups = append(resp.Groups, xmlSecurityGroup{
				OwnerID: e.opts.OwnerID, GroupID: g.ID, GroupName: g.Name, Description: g.Description, VpcID: g.VpcID,
			})
		}
	}
	return resp, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// --- XML ---

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName,omitempty"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type xmlInstance struct {
	InstanceID   string       `xml:"instanceId"`
	ImageID      string       `xml:"imageId,omitempty"`
	State        xmlState     `xml:"instanceState"`
	PrivateDNS   string       `xml:"privateDnsName"`
	PublicDNS    string       `xml:"dnsName"`
	InstanceType string       `xml:"instanceType"`
	LaunchTime   string       `xml:"launchTime"`
	Placement    xmlPlacement `xml:"placement"`
	SubnetID     string       `xml:"subnetId,omitempty"`
	VpcID        string       `xml:"vpcId,omitempty"`
	PrivateIP    string       `xml:"privateIpAddress,omitempty"`
	PublicIP     string       `xml:"ipAddress,omitempty"`
	Groups       []xmlGroup   `xml:"groupSet>item"`
	Architecture string       `xml:"architecture"`
	ClientToken  string       `xml:"clientToken,omitempty"`
	Tags         []xmlTag     `xml:"tagSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []xmlGroup    `xml:"groupSet>item"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name
	RequestID string `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"TerminateInstancesResponse"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type xmlSecurityGroup struct {
	OwnerID     string `xml:"ownerId"`
	GroupID     string `xml:"groupId"`
	GroupName   string `xml:"groupName"`
	Description string `xml:"groupDescription"`
	VpcID       string `xml:"vpcId"`
}

type describeSecurityGroupsResponse struct {
	XMLName   xml.Name           `xml:"DescribeSecurityGroupsResponse"`
	RequestID string             `xml:"requestId"`
	Groups    []xmlSecurityGroup `xml:"securityGroupInfo>item"`
}

type xmlErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Errors    []xmlErr `xml:"Errors>Error"`
	RequestID string   `xml:"RequestID"`
}

type xmlErr struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func writeXML(w http.ResponseWriter, reqID string, status int, body any) {
	out, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}

func writeError(w http.ResponseWriter, reqID string, aerr *apiError) {
	writeXML(w, reqID, aerr.status, &xmlErrorResponse{
		Errors:    []xmlErr{{Code: aerr.code, Message: aerr.message}},
		RequestID: reqID,
	})
}

// newRequestID returns a random UUID-shaped request id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
