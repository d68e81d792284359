package ec2emu

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Regions serves several emulated regions on one endpoint, for a caller
// that gives every regional client the same BaseEndpoint and only changes
// the region: each request goes to the Emulator of the region its SigV4
// credential scope names. A request for a region with no Emulator fails
// with AuthFailure (401). Each member Emulator keeps its own instances,
// faults and call counts, and also answers on its own URL.
type Regions struct {
	srv      *httptest.Server
	byRegion map[string]*Emulator
}

// NewRegions starts one Emulator per Options (each Options.Region must be
// set and distinct; it panics otherwise) and a shared endpoint in front of
// them. Close stops them all.
func NewRegions(opts ...Options) *Regions {
	r := &Regions{byRegion: map[string]*Emulator{}}
	for _, o := range opts {
		if o.Region == "" {
			panic("ec2emu: NewRegions needs Options.Region")
		}
		if _, dup := r.byRegion[o.Region]; dup {
			panic(fmt.Sprintf("ec2emu: region %s given twice", o.Region))
		}
		r.byRegion[o.Region] = New(o)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	return r
}

// StartRegions is NewRegions for a test: everything is closed when t ends.
func StartRegions(t testing.TB, opts ...Options) *Regions {
	t.Helper()
	r := NewRegions(opts...)
	t.Cleanup(r.Close)
	return r
}

// URL is the shared endpoint ("http://127.0.0.1:port").
func (r *Regions) URL() string { return r.srv.URL }

// Region returns the Emulator of a region, or nil if there is none.
func (r *Regions) Region(name string) *Emulator { return r.byRegion[name] }

// Names returns the regions served, sorted.
func (r *Regions) Names() []string {
	names := make([]string, 0, len(r.byRegion))
	for n := range r.byRegion {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Config returns an aws.Config with static dummy credentials and no region
// (set one per client, as ec2.Options.Region).
func (r *Regions) Config() aws.Config {
	var c aws.Config
	for _, e := range r.byRegion {
		c = e.Config()
		break
	}
	c.Region = ""
	return c
}

// Client returns a real SDK EC2 client for region on the shared endpoint.
func (r *Regions) Client(region string, optFns ...func(*ec2.Options)) *ec2.Client {
	fns := append([]func(*ec2.Options){func(o *ec2.Options) {
		o.Region = region
		o.BaseEndpoint = aws.String(r.srv.URL)
	}}, optFns...)
	return ec2.NewFromConfig(r.Config(), fns...)
}

// Close stops the shared endpoint and every member Emulator.
func (r *Regions) Close() {
	r.srv.CloseClientConnections()
	r.srv.Close()
	for _, e := range r.byRegion {
		e.Close()
	}
}

func (r *Regions) serveHTTP(w http.ResponseWriter, req *http.Request) {
	m := sigv4Scope.FindStringSubmatch(req.Header.Get("Authorization"))
	if m == nil {
		writeError(w, newRequestID(), errorf(CodeAuthFailure, "AWS was not able to validate the provided access credentials (no SigV4 Authorization header)"))
		return
	}
	e := r.byRegion[m[1]]
	if e == nil {
		writeError(w, newRequestID(), errorf(CodeAuthFailure, "no emulated region %q (serving %v)", m[1], r.Names()))
		return
	}
	e.serveHTTP(w, req)
}
