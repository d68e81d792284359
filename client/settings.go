package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// DefaultURL is the manager address used when Settings.URL is empty: the
// manager's default public gRPC port on this host.
const DefaultURL = "localhost:6790"

// DefaultPort is appended to a manager address given without a port.
const DefaultPort = "6790"

// Settings configures Connect. The zero value is usable: it connects to
// DefaultURL with no per-call timeout and discards log output.
type Settings struct {
	// URL is one manager address "host:port", or several separated by
	// commas ("m1:6790,m2:6790,m3:6790"). Spaces around entries are ignored;
	// an entry without a port gets DefaultPort; an optional "grpc://" or
	// "http://" prefix is stripped. Empty means DefaultURL.
	URL string

	// DialOptions are appended after the client's own options (insecure
	// transport credentials, the static resolver, the service config and
	// reconnect backoff), so an option given here overrides the default
	// one of the same kind, e.g. grpc.WithTransportCredentials for TLS or
	// grpc.WithConnectParams for a different reconnect backoff.
	DialOptions []grpc.DialOption

	// Timeout bounds each unary call and each JobSearch (the whole
	// stream) when positive; the caller's context can only shorten it.
	// It never applies to EventStream, CreateStatusChannel or
	// JobSearchSeq, which last as long as their context. Zero means no
	// timeout beyond the caller's context.
	Timeout time.Duration

	// TLS, when set, connects with TLS using this configuration (see
	// TLSFiles for one built from PEM files): the manager's certificate
	// is verified against TLS.RootCAs (the system's roots if nil) and the
	// host of each address in URL, unless TLS.ServerName names the one
	// every manager's certificate must carry; a client certificate in it
	// is presented to a manager that requires one (mutual TLS). Nil:
	// plaintext, which a manager serving TLS refuses. The configuration
	// must not be modified after Connect.
	TLS *tls.Config

	// Token is the secret of an ACL token (norsk-ctl acl token create),
	// sent with every call as "authorization: Bearer <secret>" metadata,
	// for a manager started with --acl. Empty: no token (a manager with
	// ACLs off needs none). Over plaintext it travels in the clear: use TLS
	// on untrusted networks.
	Token string

	// Logger receives the client's own log lines (event-stream reconnects,
	// dropped out-of-order events). Nil discards them.
	Logger *slog.Logger
}

// DefaultSettings returns Settings with DefaultURL and a 30 second per-call
// timeout, the values norsk-ctl uses.
func DefaultSettings() Settings {
	return Settings{URL: DefaultURL, Timeout: 30 * time.Second}
}

// Validate reports the first problem with s, naming the field: a negative
// Timeout, a URL entry that is not a valid host:port, or a Token with
// whitespace in it.
func (s Settings) Validate() error {
	if s.Timeout < 0 {
		return fmt.Errorf("client: Settings.Timeout (%s) must not be negative", s.Timeout)
	}
	if _, err := ParseURL(s.URL); err != nil {
		return fmt.Errorf("client: Settings.URL: %w", err)
	}
	return checkToken(s.Token)
}

// errEmptyAddress is returned by ParseURL for an empty entry such as the
// middle of "a:1,,b:2".
var errEmptyAddress = errors.New("empty manager address")

// ParseURL splits a Settings.URL value into normalised "host:port" addresses,
// in the order given and without duplicates. An empty url yields
// []string{DefaultURL}. It fails on an empty entry, a port that is not a
// number in 1-65535, or a host containing a path or spaces.
func ParseURL(url string) ([]string, error) {
	if strings.TrimSpace(url) == "" {
		return []string{DefaultURL}, nil
	}
	var addrs []string
	seen := make(map[string]bool)
	for _, entry := range strings.Split(url, ",") {
		addr, err := parseAddress(entry)
		if err != nil {
			return nil, err
		}
		if !seen[addr] {
			seen[addr] = true
			addrs = append(addrs, addr)
		}
	}
	return addrs, nil
}

// parseAddress normalises one entry of a Settings.URL.
func parseAddress(entry string) (string, error) {
	a := strings.TrimSpace(entry)
	for _, prefix := range []string{"grpc://", "http://", "dns:///"} {
		a = strings.TrimPrefix(a, prefix)
	}
	a = strings.TrimSuffix(a, "/")
	if a == "" {
		return "", errEmptyAddress
	}
	if strings.ContainsAny(a, "/ \t") {
		return "", fmt.Errorf("manager address %q: want host:port", entry)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		// No port (or an unbracketed IPv6 literal): add the default port.
		host, port = strings.Trim(a, "[]"), DefaultPort
		if strings.Count(host, ":") == 1 {
			return "", fmt.Errorf("manager address %q: want host:port", entry)
		}
	}
	if host == "" {
		return "", fmt.Errorf("manager address %q: missing host", entry)
	}
	if !validPort(port) {
		return "", fmt.Errorf("manager address %q: port %q is not a number in 1-65535", entry, port)
	}
	return net.JoinHostPort(host, port), nil
}

// validPort reports whether p is a decimal port number in 1-65535.
func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}
