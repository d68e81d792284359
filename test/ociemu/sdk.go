package ociemu

import (
	"fmt"
	"net/http"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
)

// ConfigurationProvider returns an SDK configuration provider for the
// emulator's own key and region (see APIKey.ConfigurationProvider).
func (s *Server) ConfigurationProvider() common.ConfigurationProvider {
	return s.key.ConfigurationProvider(s.opts.Region)
}

// ConfigureClient points an SDK client at the emulator: it sets Host to
// URL() — the SDK keeps an "http://" scheme it finds in Host and only adds
// "https://" to a bare host name — and replaces the HTTP dispatcher with
// one that refuses every other host, so that a client the test forgot to
// configure cannot reach a real endpoint. Pass the embedded BaseClient:
// s.ConfigureClient(&compute.BaseClient). Call it after the client is
// made (the constructors set Host from the region) and again after
// SetRegion.
func (s *Server) ConfigureClient(c *common.BaseClient) {
	c.Host = s.URL()
	c.HTTPClient = &http.Client{
		Transport: loopbackOnly{host: s.Host(), next: s.srv.Client().Transport},
		Timeout:   time.Minute,
	}
}

// loopbackOnly is a RoundTripper that sends requests to one host only.
type loopbackOnly struct {
	host string
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (l loopbackOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "http" || r.URL.Host != l.host {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("ociemu: refusing a request to %s://%s: only the emulator at %s is allowed", r.URL.Scheme, r.URL.Host, l.host)
	}
	return l.next.RoundTrip(r)
}
