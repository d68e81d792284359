package docker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/worker/template"
)

// Network modes of Config.Network.
const (
	// NetworkJob gives every project its own bridge network, named after
	// the project; services reach each other by service name and port
	// mappings are published on the host (like docker compose).
	NetworkJob = "job"
	// NetworkHost runs every container in the host's network namespace;
	// port mappings are resolved on the host and handed to the service in
	// NORSK_PORT_* / NORSK_ADDR_* for it to bind (nothing is published).
	NetworkHost = "host"
)

// MediaServiceName is the service name of the Norsk Media container in a
// project, in job_info and in the resolved port mappings.
const MediaServiceName = "norsk-media"

// Config configures a Runtime. Start from DefaultConfig or DevConfig.
type Config struct {
	// StateDir is the runtime's directory: its id (the file runtime-id),
	// and per project the job record and the job's write_files. Required;
	// created (mode 0700) if missing. New locks it until Shutdown, like the
	// process runtime (cmd/ uses <worker state dir>/docker).
	StateDir string

	// Client talks to the Docker engine. Nil: a client from the standard
	// environment (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH,
	// DOCKER_TLS_VERIFY) with API version negotiation. The runtime closes
	// a client it created, never one it was given.
	Client *client.Client

	// Network is NetworkJob (default) or NetworkHost.
	Network string

	// MediaImages maps a Norsk Media version name, as the manager sends it
	// in WorkerJob.norsk_media_version (RECOMMENDED, LATEST,
	// PREVIOUS_RECOMMENDED, LTS: the manager's Version enum), to the image
	// of the Norsk Media container. Empty: jobs run only their own
	// services. Non-empty: a job whose version has no image fails.
	MediaImages map[string]string

	// DefaultHostAddress is the host address of port mappings that set
	// none. Default 127.0.0.1.
	DefaultHostAddress string

	// PullTimeout bounds the pull of one missing image. Default 10m.
	PullTimeout time.Duration

	// RestartBackoff is the delay before the first restart of a service
	// within its restart window; it doubles with each further restart in
	// the window, up to MaxRestartBackoff. Defaults 250ms and 10s.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration

	// FailStopGrace is the grace period (SIGTERM → SIGKILL) used to stop
	// the remaining containers of a failed job, and to finish a stop that
	// a previous worker process left half done. Default 10s.
	FailStopGrace time.Duration

	// OutputLinesPerSecond caps the output lines of one container
	// reported as job_info per second (stdout and stderr together); the
	// excess is counted and reported as one "N lines suppressed" note.
	// Default 20.
	OutputLinesPerSecond int

	// EventBuffer is the length of the Events channel. Default 1024.
	EventBuffer int

	// EngineCheckInterval is how often the runtime pings the Docker engine
	// to report its state (Runtime.Conditions, in the worker's health);
	// Start also pings it before creating a job. Default 5s.
	EngineCheckInterval time.Duration

	// EnginePingTimeout bounds one ping: an engine that does not answer
	// within it counts as unreachable. Default 5s.
	EnginePingTimeout time.Duration

	// Templates is the worker's product-template catalogue
	// (--template-dir, loaded once at start): a job with product_template
	// runs the template's services (Catalogue.Resolve) instead of its own.
	// Nil: no templates; such a job fails with worker.ErrTemplateUnavailable.
	Templates *template.Catalogue

	// ProtectedPaths are host paths no container may see through a bind
	// mount (a product template's bind volumes): cmd/ gives the worker's
	// state directory and its TLS key. A bind whose source is one of
	// them, inside one or a directory above one (symbolic links resolved)
	// fails the job, naming the mount (docs/design/security.md, "What a
	// job can reach"). The runtime's own mounts of a job's files are
	// not affected. Empty: nothing is refused.
	ProtectedPaths []string

	// Logger receives the runtime's logs. Nil logs text to stderr.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with production defaults; StateDir must
// still be set.
func DefaultConfig() Config {
	return Config{
		Network:              NetworkJob,
		DefaultHostAddress:   "127.0.0.1",
		PullTimeout:          10 * time.Minute,
		RestartBackoff:       250 * time.Millisecond,
		MaxRestartBackoff:    10 * time.Second,
		FailStopGrace:        10 * time.Second,
		OutputLinesPerSecond: 20,
		EventBuffer:          1024,
		EngineCheckInterval:  5 * time.Second,
		EnginePingTimeout:    5 * time.Second,
	}
}

// DevConfig returns a Config for tests: host networking, short backoffs
// and grace periods.
func DevConfig() Config {
	c := DefaultConfig()
	c.Network = NetworkHost
	c.RestartBackoff = 20 * time.Millisecond
	c.MaxRestartBackoff = 100 * time.Millisecond
	c.FailStopGrace = time.Second
	c.PullTimeout = time.Minute
	c.EngineCheckInterval = 200 * time.Millisecond
	c.EnginePingTimeout = 2 * time.Second
	return c
}

// Validate checks c and returns an error naming the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.StateDir == "":
		return errors.New("docker: StateDir is required")
	case c.Network != NetworkJob && c.Network != NetworkHost:
		return fmt.Errorf("docker: Network %q must be %q or %q", c.Network, NetworkJob, NetworkHost)
	case net.ParseIP(c.DefaultHostAddress) == nil:
		return fmt.Errorf("docker: DefaultHostAddress %q is not an IP address", c.DefaultHostAddress)
	case c.PullTimeout <= 0:
		return fmt.Errorf("docker: PullTimeout (%s) must be positive", c.PullTimeout)
	case c.RestartBackoff < 0 || c.MaxRestartBackoff < c.RestartBackoff:
		return fmt.Errorf("docker: RestartBackoff (%s) must be between 0 and MaxRestartBackoff (%s)", c.RestartBackoff, c.MaxRestartBackoff)
	case c.FailStopGrace < 0:
		return fmt.Errorf("docker: FailStopGrace (%s) must not be negative", c.FailStopGrace)
	case c.OutputLinesPerSecond < 1:
		return fmt.Errorf("docker: OutputLinesPerSecond (%d) must be at least 1", c.OutputLinesPerSecond)
	case c.EventBuffer < 1:
		return fmt.Errorf("docker: EventBuffer (%d) must be at least 1", c.EventBuffer)
	case c.EngineCheckInterval < time.Millisecond:
		return fmt.Errorf("docker: EngineCheckInterval (%s) must be at least 1ms", c.EngineCheckInterval)
	case c.EnginePingTimeout < time.Millisecond:
		return fmt.Errorf("docker: EnginePingTimeout (%s) must be at least 1ms", c.EnginePingTimeout)
	}
	for _, v := range sortedKeys(c.MediaImages) {
		if _, err := reference.ParseNormalizedNamed(c.MediaImages[v]); err != nil {
			return fmt.Errorf("docker: MediaImages[%s] %q is not an image reference: %w", v, c.MediaImages[v], err)
		}
	}
	return nil
}

// MediaVersions are the version names of the manager's Version enum
// (norsk.api.manager.Version, 1.0.384), which the manager sends as
// WorkerJob.norsk_media_version.
var MediaVersions = []string{"RECOMMENDED", "LATEST", "PREVIOUS_RECOMMENDED", "LTS"}

// ParseMediaImages parses VERSION=IMAGE pairs (as given to
// --media-image, possibly comma-separated) into a MediaImages map. Version
// names are case-insensitive and must be one of MediaVersions; images must
// be image references. Errors name the bad entry.
func ParseMediaImages(entries []string) (map[string]string, error) {
	out := map[string]string{}
	for _, entry := range entries {
		for _, pair := range strings.Split(entry, ",") {
			pair = strings.TrimSpace(pair)
			if pair == "" {
				continue
			}
			v, img, ok := strings.Cut(pair, "=")
			v = strings.ToUpper(strings.TrimSpace(v))
			img = strings.TrimSpace(img)
			if !ok || v == "" || img == "" {
				return nil, fmt.Errorf("%q: want VERSION=IMAGE, e.g. RECOMMENDED=example/norsk-media:1.0", pair)
			}
			known := false
			for _, mv := range MediaVersions {
				known = known || mv == v
			}
			if !known {
				return nil, fmt.Errorf("%q: version %q is not one of %s", pair, v, strings.Join(MediaVersions, ", "))
			}
			if _, err := reference.ParseNormalizedNamed(img); err != nil {
				return nil, fmt.Errorf("%q: %q is not an image reference: %v", pair, img, err)
			}
			if prev, dup := out[v]; dup && prev != img {
				return nil, fmt.Errorf("%q: version %s is given twice (%s and %s)", pair, v, prev, img)
			}
			out[v] = img
		}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
