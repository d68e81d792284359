package dockerenv

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// ProbePackage is the import path of the probe program (the entrypoint of
// the test images). The binary is built from the module containing the
// calling test, so tests must run inside this module.
const ProbePackage = "github.com/norsk-oss/norsk-manager/test/containers/probe"

// ProbeRepo is the repository of the images ProbeImage builds; the tag is
// the first 12 hex digits of the binary's sha256.
const ProbeRepo = "norsk-test/probe"

// imageTimeout bounds ProbeImage's inspect, lock wait and build.
const imageTimeout = 3 * time.Minute

// probeBin caches the probe binary of this process: go build is quick with a
// warm build cache, but not free, and every test of a package wants it.
var probeBin struct {
	mu   sync.Mutex
	data []byte // static linux binary for runtime.GOARCH
	sum  string // hex sha256 of data
}

// ProbeBinary returns the probe program built as a static Linux binary for
// runtime.GOARCH (CGO_ENABLED=0, go build -trimpath, symbols stripped), and
// the hex sha256 of it. It is built once per test process, with the go
// command on PATH (go test puts its own first), one build at a time per
// machine (a lock file in os.TempDir), so concurrent test packages share the
// build cache instead of compiling the standard library side by side. A
// build failure fails t.
func ProbeBinary(t testing.TB) (binary []byte, sha256Hex string) {
	t.Helper()
	binary, sha256Hex, err := BuildProbeBinary(context.Background())
	if err != nil {
		t.Fatalf("probe binary: %v", err)
	}
	return binary, sha256Hex
}

// BuildProbeBinary is ProbeBinary for code that is not a test (the bench):
// the same build, cached the same way (per process), with the failure
// returned. The go command runs in the current directory, which must be
// inside this module.
func BuildProbeBinary(ctx context.Context) (binary []byte, sha256Hex string, err error) {
	probeBin.mu.Lock()
	defer probeBin.mu.Unlock()
	if probeBin.data != nil {
		return probeBin.data, probeBin.sum, nil
	}
	dir, err := os.MkdirTemp("", "norsk-probe-build-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "probe")
	// One go build at a time on this machine: with a cold build cache the
	// standard library is compiled for CGO_ENABLED=0 -trimpath (half a
	// minute); later builds, in any process, then only link.
	unlock, err := lockFile(filepath.Join(os.TempDir(), "norsk-test-probe-build.lock"))
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ProbePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("go build %s: %v\n%s", ProbePackage, err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	probeBin.data, probeBin.sum = data, hex.EncodeToString(sum[:])
	return probeBin.data, probeBin.sum, nil
}

// ProbeImage returns the tag ("norsk-test/probe:<12 hex>") of an image on
// the engine holding only the probe binary as /probe, its ENTRYPOINT, and
// the label io.norsk.test=1. The image is built from scratch with the
// engine's builder when no image has that tag yet; the tag follows the
// binary's content, so unchanged sources reuse the image across test runs.
// Concurrent callers in several processes are serialised by a lock file in
// os.TempDir, and a second build of the same tag would be harmless anyway.
// Errors fail t. The image is left in place for later tests. Containers
// inherit image labels, so every container of this image carries
// io.norsk.test=1 too: label containers with a key of their own to find one
// test's (Leftovers, Cleanup).
func ProbeImage(t testing.TB, cli client.APIClient) string {
	t.Helper()
	tag, _, err := EnsureProbeImage(context.Background(), cli)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return tag
}

// EnsureProbeImage is ProbeImage for code that is not a test (the bench):
// it returns the tag, whether this call built the image (false: the engine
// had it), and the failure, naming the tag, instead of failing a test. Its
// engine calls are bounded by 3 minutes and by ctx.
func EnsureProbeImage(ctx context.Context, cli client.APIClient) (tag string, built bool, err error) {
	data, sum, err := BuildProbeBinary(ctx)
	if err != nil {
		return "", false, fmt.Errorf("probe binary: %w", err)
	}
	tag = ProbeRepo + ":" + sum[:12]
	ctx, cancel := context.WithTimeout(ctx, imageTimeout)
	defer cancel()
	if built, err = ensureImage(ctx, cli, tag, data); err != nil {
		return "", false, fmt.Errorf("probe image %s: %w", tag, err)
	}
	return tag, built, nil
}

// ensureImage builds the probe image tag from binary unless the engine has
// it, holding the machine-wide lock of tag while it checks and builds.
// built says whether this call built it.
func ensureImage(ctx context.Context, cli client.APIClient, tag string, binary []byte) (built bool, err error) {
	if ok, err := imageExists(ctx, cli, tag); err != nil || ok {
		return false, err
	}
	unlock, err := lockFile(filepath.Join(os.TempDir(), "norsk-test-image-"+strings.NewReplacer("/", "_", ":", "_").Replace(tag)+".lock"))
	if err != nil {
		return false, err
	}
	defer unlock()
	if ok, err := imageExists(ctx, cli, tag); err != nil || ok { // built while we waited
		return false, err
	}
	if _, err := buildImage(ctx, cli, tag, binary); err != nil {
		return false, err
	}
	return true, nil
}

// imageExists says whether the engine has an image named ref.
func imageExists(ctx context.Context, cli client.APIClient, ref string) (bool, error) {
	_, err := cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("inspect %s: %w", ref, err)
}

// probeDockerfile is the recipe of the probe image.
const probeDockerfile = `FROM scratch
COPY probe /probe
ENTRYPOINT ["/probe"]
`

// buildImage builds the probe image from binary with the engine's classic
// builder (no BuildKit, no pulls: FROM scratch needs no base image), tags it
// tag and returns its id. Building an existing tag again moves the tag to
// the new image and leaves the old one dangling.
func buildImage(ctx context.Context, cli client.APIClient, tag string, binary []byte) (id string, err error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(probeDockerfile)}, {"probe", 0o755, binary}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: layerTime}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Labels:      map[string]string{TestLabel: "1"},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return "", fmt.Errorf("build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	id, out, err := readMessages(resp.Body)
	if err == nil && id == "" {
		err = fmt.Errorf("no image id in the build output: %s", out)
	}
	if err != nil {
		return "", fmt.Errorf("build %s: %w", tag, err)
	}
	return id, nil
}

// readMessages consumes a JSON message stream of the Engine API (build,
// pull) and returns the last aux ID in it (a build's image id) and the
// stream text. An error the stream reports is returned with the text before
// it, which names the failing step.
func readMessages(r io.Reader) (id, text string, err error) {
	var out strings.Builder
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Stream      string `json:"stream"` // build output
			Status      string `json:"status"` // pull progress
			ID          string `json:"id"`     // layer of a pull status
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
			Aux *struct {
				ID string `json:"ID"`
			} `json:"aux"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", out.String(), fmt.Errorf("reading the message stream: %w (output so far: %s)", err, out.String())
		}
		out.WriteString(msg.Stream)
		if msg.Status != "" {
			fmt.Fprintf(&out, "%s %s\n", msg.ID, msg.Status)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			msg.Error = msg.ErrorDetail.Message
		}
		if msg.Error != "" {
			return "", out.String(), fmt.Errorf("%s (output: %s)", msg.Error, strings.TrimSpace(out.String()))
		}
		if msg.Aux != nil && msg.Aux.ID != "" {
			id = msg.Aux.ID
		}
	}
	return id, out.String(), nil
}
