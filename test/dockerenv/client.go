// Package dockerenv is the test tooling of the Docker runtime: a client for
// the local engine that skips tests where there is none, the probe image
// (a FROM-scratch image holding the static test/containers/probe binary,
// built on the engine, never pulled), an in-process registry that engines
// can really pull from, and helpers to find and remove what a test left
// behind. See docs/design/docker-test-images.md.
//
// Nothing here needs the docker CLI or network access beyond loopback.
package dockerenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// RequireDockerEnv is the environment variable that turns "no engine" from
// a skip into a failure: set it to 1 where Docker must be available (CI).
const RequireDockerEnv = "NORSK_REQUIRE_DOCKER"

// TestLabel is the label (with value "1") on every image this package makes.
const TestLabel = "io.norsk.test"

// pingTimeout bounds the reachability check of Client.
const pingTimeout = 5 * time.Second

// Client connects to the engine the environment names (DOCKER_HOST,
// DOCKER_API_VERSION, DOCKER_CERT_PATH, DOCKER_TLS_VERIFY; by default the
// local unix socket), pings it with a 5 s deadline and negotiates the API
// version from the ping, so ClientVersion reports the version in use. If the engine cannot be reached, the test is skipped — or fails
// when NORSK_REQUIRE_DOCKER=1. The client is closed when the test ends.
func Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := Connect(context.Background())
	if err != nil {
		unreachable(t, err)
		return nil // unreachable ends the test; this is for fakes in tests
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Connect is Client for code that is not a test (the bench): it returns
// the engine's unreachability as an error, and the caller closes the
// client. The ping is bounded by 5 s and by ctx.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	ping, err := cli.Ping(ctx)
	if err != nil {
		cli.Close()
		return nil, err
	}
	// Negotiate now, from this ping: Ping itself does not, and ClientVersion
	// should tell callers the version in use (1.41 on a 20.10 engine).
	cli.NegotiateAPIVersionPing(ping)
	return cli, nil
}

// unreachable fails or skips t because the engine is unreachable (err).
func unreachable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(RequireDockerEnv) == "1" {
		t.Fatalf("docker engine not reachable: %v (%s=1, so this fails instead of skipping)", err, RequireDockerEnv)
	}
	t.Skipf("docker engine not reachable: %v; set %s=1 to fail instead", err, RequireDockerEnv)
}
