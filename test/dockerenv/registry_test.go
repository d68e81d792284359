package dockerenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
)

// manifestDoc is the part of a schema 2 manifest the tests read.
type manifestDoc struct {
	SchemaVersion int    `json:"schemaVersion"`
	MediaType     string `json:"mediaType"`
	Config        struct {
		MediaType, Digest string
		Size              int
	} `json:"config"`
	Layers []struct {
		MediaType, Digest string
		Size              int
	} `json:"layers"`
}

// fetch does method url and returns the response with its body read.
func fetch(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestRegistryAPI(t *testing.T) {
	r := NewRegistry(t)
	ProbeBinary(t)
	start := time.Now()
	ref := r.AddProbe(t, "norsk/probe", "v1")
	t.Logf("AddProbe: %s", time.Since(start))
	if want := r.Host() + "/norsk/probe:v1"; ref != want || !strings.HasPrefix(r.Host(), "127.0.0.1:") {
		t.Fatalf("AddProbe = %q; want %q on 127.0.0.1", ref, want)
	}
	base := "http://" + r.Host()
	resp, body := fetch(t, "GET", base+"/v2/norsk/probe/manifests/v1")
	var m manifestDoc
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 2 || m.MediaType != ManifestMediaType || m.Config.MediaType != ConfigMediaType ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != LayerMediaType {
		t.Fatalf("manifest %s", body)
	}
	manifestDigest := resp.Header.Get("Docker-Content-Digest")

	// Every object is served with its digest, type and length; HEAD
	// without a body.
	objects := []struct {
		name, path, contentType, digest string
	}{
		{"manifest by tag", "/v2/norsk/probe/manifests/v1", ManifestMediaType, digestOf(body)},
		{"manifest by digest", "/v2/norsk/probe/manifests/" + manifestDigest, ManifestMediaType, digestOf(body)},
		{"config", "/v2/norsk/probe/blobs/" + m.Config.Digest, "application/octet-stream", m.Config.Digest},
		{"layer", "/v2/norsk/probe/blobs/" + m.Layers[0].Digest, "application/octet-stream", m.Layers[0].Digest},
	}
	for _, o := range objects {
		t.Run(o.name, func(t *testing.T) {
			for _, method := range []string{"GET", "HEAD"} {
				resp, got := fetch(t, method, base+o.path)
				h := resp.Header
				if resp.StatusCode != 200 || h.Get("Content-Type") != o.contentType || h.Get("Docker-Content-Digest") != o.digest {
					t.Fatalf("%s: %d, type %q, digest %q; want 200, %q, %q", method, resp.StatusCode, h.Get("Content-Type"), h.Get("Docker-Content-Digest"), o.contentType, o.digest)
				}
				if method == "GET" && digestOf(got) != o.digest {
					t.Errorf("GET body has digest %s; want %s", digestOf(got), o.digest)
				}
				if method == "HEAD" && len(got) != 0 {
					t.Errorf("HEAD has a %d-byte body", len(got))
				}
				if resp.ContentLength <= 0 {
					t.Errorf("%s: Content-Length %d", method, resp.ContentLength)
				}
			}
		})
	}

	errorsTests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v2/norsk/probe/manifests/v2", 404, "MANIFEST_UNKNOWN"},
		{"HEAD", "/v2/norsk/probe/manifests/sha256:0000", 404, ""},
		{"GET", "/v2/norsk/probe/blobs/sha256:0000", 404, "BLOB_UNKNOWN"},
		{"GET", "/v2/norsk/probe/blobs/" + manifestDigest, 404, "BLOB_UNKNOWN"},
		{"GET", "/v2/other/manifests/v1", 404, "NAME_UNKNOWN"},
		{"GET", "/v2/norsk/probe/tags/list", 404, "NAME_UNKNOWN"},
		{"PUT", "/v2/norsk/probe/manifests/v1", 405, "UNSUPPORTED"},
		{"GET", "/other", 404, "NOT_FOUND"},
	}
	for _, tc := range errorsTests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, body := fetch(t, tc.method, base+tc.path)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d; want %d", resp.StatusCode, tc.status)
			}
			if tc.code == "" {
				return
			}
			var e struct {
				Errors []struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || len(e.Errors) != 1 || e.Errors[0].Code != tc.code {
				t.Errorf("body %s (%v); want error code %s", body, err, tc.code)
			}
		})
	}

	if resp, _ := fetch(t, "GET", base+"/v2/"); resp.StatusCode != 200 || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
		t.Errorf("/v2/: %d %v", resp.StatusCode, resp.Header)
	}
	// Three requests of the manifest by tag above (two GETs, one HEAD);
	// requests by digest and failed ones do not count.
	if n := r.Pulls("norsk/probe"); n != 3 {
		t.Errorf("Pulls = %d; want 3 (requests %q)", n, r.Requests())
	}

	// The config describes the layer, which holds the probe binary.
	_, config := fetch(t, "GET", base+"/v2/norsk/probe/blobs/"+m.Config.Digest)
	var c struct {
		Architecture, OS string
		Config           struct{ Entrypoint []string }
		RootFS           struct {
			Type    string
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	_, layer := fetch(t, "GET", base+"/v2/norsk/probe/blobs/"+m.Layers[0].Digest)
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	layerTar, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if c.OS != "linux" || !slices.Equal(c.Config.Entrypoint, []string{"/probe"}) || c.RootFS.Type != "layers" ||
		!slices.Equal(c.RootFS.DiffIDs, []string{digestOf(layerTar)}) {
		t.Errorf("config %s; want linux, entrypoint /probe, diff_ids [%s]", config, digestOf(layerTar))
	}
	tr := tar.NewReader(bytes.NewReader(layerTar))
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(tr)
	binary, _ := ProbeBinary(t)
	if hdr.Name != "probe" || hdr.Mode&0o111 == 0 || !bytes.Equal(got, binary) {
		t.Errorf("layer holds %q mode %o (%d bytes); want the executable probe", hdr.Name, hdr.Mode, len(got))
	}

	// The same binary gives the same digests in another registry.
	if other := NewRegistry(t); other.AddProbe(t, "x", "y") != "" {
		_, body2 := fetch(t, "GET", "http://"+other.Host()+"/v2/x/manifests/y")
		if !bytes.Equal(body, body2) {
			t.Errorf("manifests differ between registries:\n%s\n%s", body, body2)
		}
	}
}

// TestRegistryPull has the engine pull an image from the registry and run
// it.
func TestRegistryPull(t *testing.T) {
	cli := Client(t)
	r := NewRegistry(t)
	repo := "norsk-test/pulled-" + uniqueValue(t)
	ref := r.AddProbe(t, repo, "v1")
	value := uniqueValue(t)
	Cleanup(t, cli, runLabel, value)
	t.Cleanup(func() { // if the test fails before it removes the image
		cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
	})

	// The second pull finds everything in the engine already: a 20.10
	// engine then sends only a HEAD of the tag, which still counts.
	for want := 1; want <= 2; want++ {
		rc, err := cli.ImagePull(t.Context(), ref, image.PullOptions{})
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		_, text, err := readMessages(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("pull %s: %v\nregistry requests: %q", ref, err, r.Requests())
		}
		if n := r.Pulls(repo); n != want {
			t.Fatalf("Pulls = %d after pull %d (requests %q, output %s)", n, want, r.Requests(), text)
		}
	}
	img, err := cli.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[TestLabel] != "1" || img.Architecture == "" {
		t.Errorf("pulled image: labels %v, architecture %q", img.Config.Labels, img.Architecture)
	}

	id := startProbe(t, cli, ref, value, value, container.Config{Cmd: []string{"exit", "3"}}, container.HostConfig{})
	if code := waitExit(t, cli, id); code != 3 {
		t.Errorf("exit code %d; want 3", code)
	}
	if err := cli.ContainerRemove(t.Context(), id, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ImageRemove(t.Context(), ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := imageExists(t.Context(), cli, ref); ok || err != nil {
		t.Errorf("image %s still there after removal (%v)", ref, err)
	}
	if left, err := Leftovers(t.Context(), cli, runLabel, value); len(left) > 0 || err != nil {
		t.Errorf("leftovers %q, %v", left, err)
	}
	t.Logf("registry requests: %q", r.Requests())
}
