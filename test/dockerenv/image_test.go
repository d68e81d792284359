package dockerenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// runLabel is the label of everything these tests create; its value is
// unique per test, so Leftovers and Cleanup see only that test's objects.
const runLabel = "io.norsk.test.dockerenv"

// uniqueValue returns a fresh label value (or tag suffix) for t.
func uniqueValue(t testing.TB) string {
	b := make([]byte, 6)
	rand.Read(b)
	return strings.ToLower(strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())) + "-" + hex.EncodeToString(b)
}

func TestProbeImage(t *testing.T) {
	cli := Client(t)
	start := time.Now()
	tag := ProbeImage(t, cli)
	first := time.Since(start)
	start = time.Now()
	if again := ProbeImage(t, cli); again != tag {
		t.Fatalf("second ProbeImage = %q; want %q", again, tag)
	}
	t.Logf("ProbeImage %s: first call %s, second %s", tag, first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	_, sum := ProbeBinary(t)
	if want := ProbeRepo + ":" + sum[:12]; tag != want {
		t.Errorf("tag %q; want %q", tag, want)
	}
	img, err := cli.ImageInspect(t.Context(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[TestLabel] != "1" || !slices.Equal(img.Config.Entrypoint, []string{"/probe"}) || img.Os != "linux" {
		t.Errorf("image labels %v, entrypoint %q, os %q; want %s=1, [/probe], linux", img.Config.Labels, img.Config.Entrypoint, img.Os, TestLabel)
	}
	if len(img.RootFS.Layers) != 1 {
		t.Errorf("image has %d layers; want 1 (scratch + /probe)", len(img.RootFS.Layers))
	}
}

// startProbe creates and starts a container "norsk-test-<name>" of the
// probe image with host networking, labelled runLabel=value, and returns
// its id.
func startProbe(t *testing.T, cli client.APIClient, ref, name, value string, cfg container.Config, hc container.HostConfig) string {
	t.Helper()
	cfg.Image = ref
	cfg.Labels = map[string]string{runLabel: value}
	hc.NetworkMode = "host"
	created, err := cli.ContainerCreate(t.Context(), &cfg, &hc, nil, nil, "norsk-test-"+name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(t.Context(), created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return created.ID
}

// containerLogs returns a container's stdout and stderr so far.
func containerLogs(ctx context.Context, cli client.APIClient, id string) (stdout, stderr string, err error) {
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", "", err
	}
	defer rc.Close()
	var o, e bytes.Buffer
	_, err = stdcopy.StdCopy(&o, &e, rc)
	return o.String(), e.String(), err
}

// awaitLog polls the container's stdout until re matches, for 20 s, and
// returns the submatches.
func awaitLog(t *testing.T, cli client.APIClient, id string, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, err := containerLogs(t.Context(), cli, id)
		if m := re.FindStringSubmatch(out); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("container log has no match of %s after 20s (err %v):\n%s", re, err, out)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// waitExit waits up to 30 s for the container to stop and returns its exit code.
func waitExit(t *testing.T, cli client.APIClient, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	okCh, errCh := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case res := <-okCh:
		return res.StatusCode
	case err := <-errCh:
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return 0
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var listeningRE = regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)

// TestProbeContainer runs the probe image for real: endpoints, a volume,
// exit codes and the stop (SIGTERM as pid 1) behaviour the runtime relies on.
func TestProbeContainer(t *testing.T) {
	cli := Client(t)
	ref := ProbeImage(t, cli)

	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		value := uniqueValue(t)
		Cleanup(t, cli, runLabel, value)
		vol, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: "norsk-test-" + value, Labels: map[string]string{runLabel: value}})
		if err != nil {
			t.Fatal(err)
		}
		id := startProbe(t, cli, ref, value, value,
			container.Config{Cmd: []string{"serve", "--listen", "127.0.0.1:0"}, Env: []string{"PROBE_GREETING=hello"}},
			container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol.Name, Target: "/data"}}})
		base := "http://" + awaitLog(t, cli, id, listeningRE)[1]
		if code, body := get(t, base+"/healthz"); code != 200 || body != "ok" {
			t.Errorf("/healthz = %d %q", code, body)
		}
		if code, body := get(t, base+"/env?name=PROBE_GREETING"); code != 200 || body != "hello" {
			t.Errorf("/env = %d %q", code, body)
		}
		if code, body := get(t, base+"/pid"); code != 200 || body != "1" {
			t.Errorf("/pid = %d %q; want the entrypoint as pid 1", code, body)
		}
		resp, err := http.Post(base+"/write?path=/data/sub/f", "text/plain", strings.NewReader("persisted"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/write: %v %v", resp, err)
		}
		resp.Body.Close()
		if code, body := get(t, base+"/file?path=/data/sub/f"); code != 200 || body != "persisted" {
			t.Errorf("/file = %d %q", code, body)
		}
		awaitLog(t, cli, id, regexp.MustCompile(`GET /file\?path=/data/sub/f from`))
	})

	stops := []struct {
		name     string
		cmd      []string
		stopWait int // seconds between SIGTERM and SIGKILL
		ready    *regexp.Regexp
		wantExit int64
		within   time.Duration
	}{
		{"serve exits on SIGTERM", []string{"serve", "--listen", "127.0.0.1:0"}, 30, listeningRE, 0, 10 * time.Second},
		{"sleep exits on SIGTERM", []string{"sleep"}, 30, regexp.MustCompile(`sleeping`), 0, 10 * time.Second},
		{"ignore-term is killed after grace", []string{"sleep", "--ignore-term"}, 1, regexp.MustCompile(`sleeping`), 137, 20 * time.Second},
	}
	for _, tc := range stops {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			value := uniqueValue(t)
			Cleanup(t, cli, runLabel, value)
			id := startProbe(t, cli, ref, value, value, container.Config{Cmd: tc.cmd}, container.HostConfig{})
			awaitLog(t, cli, id, tc.ready)
			start := time.Now()
			if err := cli.ContainerStop(t.Context(), id, container.StopOptions{Timeout: &tc.stopWait}); err != nil {
				t.Fatal(err)
			}
			if code := waitExit(t, cli, id); code != tc.wantExit {
				t.Errorf("exit code %d; want %d", code, tc.wantExit)
			}
			if d := time.Since(start); d > tc.within {
				t.Errorf("stopped after %s; want within %s", d, tc.within)
			}
		})
	}

	exits := []struct {
		args []string
		want int64
	}{
		{[]string{"exit", "0"}, 0},
		{[]string{"exit", "3"}, 3},
		{[]string{"exit", "42", "--after", "100ms"}, 42},
	}
	for _, tc := range exits {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			value := uniqueValue(t)
			Cleanup(t, cli, runLabel, value)
			id := startProbe(t, cli, ref, value, value, container.Config{Cmd: tc.args}, container.HostConfig{})
			if code := waitExit(t, cli, id); code != tc.want {
				t.Errorf("exit code %d; want %d", code, tc.want)
			}
			stdout, stderr, err := containerLogs(t.Context(), cli, id)
			if err != nil || !strings.Contains(stdout, "(stdout)") || !strings.Contains(stderr, "(stderr)") {
				t.Errorf("logs: stdout %q, stderr %q, %v; want a line on each", stdout, stderr, err)
			}
		})
	}
}

// uniqueBinary returns the probe binary with value appended: an image of
// its own, which the builder cache cannot share with ProbeImage's (whose
// id these tests must never remove: other packages' tests may be using it).
func uniqueBinary(t testing.TB, value string) []byte {
	binary, _ := ProbeBinary(t)
	return append(slices.Clip(binary), value...)
}

// TestBuildImageTwice builds one tag concurrently: every build succeeds and
// the tag ends up on one of the images (the others are left untagged).
func TestBuildImageTwice(t *testing.T) {
	cli := Client(t)
	value := uniqueValue(t)
	binary := uniqueBinary(t, value)
	tag := ProbeRepo + ":" + value
	const n = 3
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i], errs[i] = buildImage(t.Context(), cli, tag, binary) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, id := range ids {
			if id != "" {
				cli.ImageRemove(context.Background(), id, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	img, err := cli.ImageInspect(t.Context(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ids, img.ID) {
		t.Errorf("tag is on %s, none of the built %v", img.ID, ids)
	}
}

// TestEnsureImageOnce builds a fresh tag from several concurrent callers
// (each with its own lock file descriptor, as separate processes would
// have): exactly one builds.
func TestEnsureImageOnce(t *testing.T) {
	cli := Client(t)
	value := uniqueValue(t)
	binary := uniqueBinary(t, value)
	tag := ProbeRepo + ":" + value
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), tag, image.RemoveOptions{PruneChildren: true})
	})
	const n = 4
	built := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() { built[i], errs[i] = ensureImage(t.Context(), cli, tag, binary) })
	}
	wg.Wait()
	t.Logf("%d concurrent ensureImage of a new tag: %s", n, time.Since(start).Round(time.Millisecond))
	builds := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("ensureImage %d: %v", i, errs[i])
		}
		if built[i] {
			builds++
		}
	}
	if builds != 1 {
		t.Errorf("%d builds; want 1", builds)
	}
	if ok, err := imageExists(t.Context(), cli, tag); !ok || err != nil {
		t.Errorf("image %s exists = %v, %v", tag, ok, err)
	}
}

func TestReadMessages(t *testing.T) {
	tests := []struct {
		name, stream, wantID, wantErr string
	}{
		{"build", `{"stream":"Step 1/3 : FROM scratch\n"}{"aux":{"ID":"sha256:abc"}}{"stream":"Successfully built abc\n"}`, "sha256:abc", ""},
		{"error detail", `{"stream":"Step 2/3 : COPY probe /probe\n"}{"errorDetail":{"message":"no such file"},"error":"no such file"}`, "", "no such file (output: Step 2/3"},
		{"pull", `{"status":"Pulling fs layer","id":"abc"}{"status":"Digest: sha256:def"}`, "", ""},
		{"garbage", `{"stream":"x"}not json`, "", "reading the message stream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, _, err := readMessages(strings.NewReader(tc.stream))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || id != tc.wantID {
				t.Fatalf("readMessages = %q, %v; want %q", id, err, tc.wantID)
			}
		})
	}
}
