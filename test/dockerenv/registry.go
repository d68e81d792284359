package dockerenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Media types of the Docker image manifest v2, schema 2.
const (
	// ManifestMediaType is the Content-Type of the manifests Registry serves.
	ManifestMediaType = "application/vnd.docker.distribution.manifest.v2+json"
	// ConfigMediaType is the media type of an image config blob.
	ConfigMediaType = "application/vnd.docker.container.image.v1+json"
	// LayerMediaType is the media type of a gzipped tar layer blob.
	LayerMediaType = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// layerTime is the fixed timestamp of the probe's files and image config, so
// the same binary always gives the same blobs and digests.
var layerTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Registry is a minimal Docker Registry HTTP API v2 server on 127.0.0.1,
// read-only, holding the images added to it. Engines treat registries on
// 127.0.0.0/8 as insecure, so they pull from it over plain HTTP without any
// configuration. It is safe for concurrent use.
type Registry struct {
	srv *httptest.Server

	mu        sync.Mutex
	manifests map[string]map[string]string // repo → tag or digest → manifest digest
	repoBlobs map[string]map[string]bool   // repo → blob digests it holds
	content   map[string][]byte            // digest → manifest or blob bytes
	pulls     map[string]int               // repo → successful manifest requests by tag
	requests  []string
}

// NewRegistry starts an empty registry on a free port of 127.0.0.1; it is
// shut down when the test ends. A listen failure fails t.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	r := &Registry{
		manifests: map[string]map[string]string{},
		repoBlobs: map[string]map[string]bool{},
		content:   map[string][]byte{},
		pulls:     map[string]int{},
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serveHTTP))
	r.srv.Listener.Close()
	r.srv.Listener = lis
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

// Host returns the registry's address, "127.0.0.1:<port>", the first part of
// the references of its images.
func (r *Registry) Host() string { return r.srv.Listener.Addr().String() }

// Pulls returns how many pulls of an image of repo by tag the registry
// answered: successful manifest requests naming a tag, GET or HEAD. A 20.10
// engine starts a pull with a HEAD of the tag and GETs the manifest (by
// digest) only if it does not have that manifest already, so GETs alone
// would miss pulls of content it has seen before. Requests by digest are
// not counted.
func (r *Registry) Pulls(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulls[repo]
}

// Requests returns every request served so far, oldest first, as
// "METHOD /path STATUS", for diagnostics.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	tagRE  = regexp.MustCompile(`^\w[\w.-]{0,127}$`)
)

// AddProbe adds the image repo:tag to the registry: one gzip tar layer
// holding the probe binary (ProbeBinary) as /probe, an image config for
// linux/runtime.GOARCH with entrypoint ["/probe"] and the label
// io.norsk.test=1, and a schema 2 manifest. It returns the image's full
// reference, "127.0.0.1:<port>/repo:tag". Adding a tag again replaces it.
// An invalid repo or tag, or a build failure, fails t. The same binary
// always gives the same digests (fixed timestamps) in every repository
// and registry: one image id, and an engine that already has it pulls with
// a single HEAD of the tag (see Pulls).
func (r *Registry) AddProbe(t testing.TB, repo, tag string) string {
	t.Helper()
	if !repoRE.MatchString(repo) || !tagRE.MatchString(tag) {
		t.Fatalf("registry: invalid repository %q or tag %q", repo, tag)
	}
	layer, diffID := probeLayer(t)
	config := mustJSON(t, map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      layerTime,
		"config": map[string]any{
			"Entrypoint": []string{"/probe"},
			"Labels":     map[string]string{TestLabel: "1"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{"created": layerTime, "created_by": "dockerenv.Registry.AddProbe"}},
	})
	manifest := mustJSON(t, map[string]any{
		"schemaVersion": 2,
		"mediaType":     ManifestMediaType,
		"config":        map[string]any{"mediaType": ConfigMediaType, "size": len(config), "digest": digestOf(config)},
		"layers": []map[string]any{
			{"mediaType": LayerMediaType, "size": len(layer), "digest": digestOf(layer)},
		},
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.repoBlobs[repo] == nil {
		r.repoBlobs[repo], r.manifests[repo] = map[string]bool{}, map[string]string{}
	}
	for _, b := range [][]byte{config, layer} {
		r.content[digestOf(b)] = b
		r.repoBlobs[repo][digestOf(b)] = true
	}
	md := digestOf(manifest)
	r.content[md] = manifest
	r.manifests[repo][tag], r.manifests[repo][md] = md, md
	return r.Host() + "/" + repo + ":" + tag
}

// probeLayerCache holds the probe layer of this process: building it costs
// about a second under the race detector, for every AddProbe otherwise.
var probeLayerCache struct {
	mu     sync.Mutex
	layer  []byte
	diffID string
}

// probeLayer returns the probe's layer blob, a gzipped tar holding
// ProbeBinary as "probe" (mode 0755, fixed mtime), and its diff id (the
// digest of the uncompressed tar). The gzip stream uses stored blocks: the
// registry is on loopback, and compressing costs seconds under -race.
// Errors fail t.
func probeLayer(t testing.TB) (layer []byte, diffID string) {
	t.Helper()
	probeLayerCache.mu.Lock()
	defer probeLayerCache.mu.Unlock()
	if probeLayerCache.layer != nil {
		return probeLayerCache.layer, probeLayerCache.diffID
	}
	binary, _ := ProbeBinary(t)
	var layerTar, gzipped bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: "probe", Mode: 0o755, Size: int64(len(binary)), Typeflag: tar.TypeReg, ModTime: layerTime}); err != nil {
		t.Fatalf("registry: layer: %v", err)
	}
	tw.Write(binary)
	if err := tw.Close(); err != nil {
		t.Fatalf("registry: layer: %v", err)
	}
	gz, _ := gzip.NewWriterLevel(&gzipped, gzip.NoCompression) // no name, zero mtime: deterministic
	gz.Write(layerTar.Bytes())
	if err := gz.Close(); err != nil {
		t.Fatalf("registry: layer: %v", err)
	}
	probeLayerCache.layer, probeLayerCache.diffID = gzipped.Bytes(), digestOf(layerTar.Bytes())
	return probeLayerCache.layer, probeLayerCache.diffID
}

// serveHTTP implements GET and HEAD of /v2/, /v2/<name>/manifests/<ref> and
// /v2/<name>/blobs/<digest>.
func (r *Registry) serveHTTP(w http.ResponseWriter, req *http.Request) {
	status := r.route(w, req)
	r.mu.Lock()
	r.requests = append(r.requests, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, status))
	r.mu.Unlock()
}

// route answers req and returns the status it sent.
func (r *Registry) route(w http.ResponseWriter, req *http.Request) int {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the operation is unsupported")
	}
	path := req.URL.Path
	if path == "/v2/" || path == "/v2" {
		return send(w, req, "application/json", "", []byte("{}"))
	}
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return registryError(w, http.StatusNotFound, "NOT_FOUND", "not a registry API path")
	}
	kind, name, ref := "", "", ""
	for _, k := range []string{"manifests", "blobs"} {
		if i := strings.LastIndex(rest, "/"+k+"/"); i > 0 {
			kind, name, ref = k, rest[:i], rest[i+len(k)+2:]
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == "" || r.manifests[name] == nil {
		return registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry")
	}
	if kind == "blobs" {
		if !r.repoBlobs[name][ref] {
			return registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown to registry")
		}
		return send(w, req, "application/octet-stream", ref, r.content[ref])
	}
	md, ok := r.manifests[name][ref]
	if !ok {
		return registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown")
	}
	if !strings.Contains(ref, ":") { // a tag, not algorithm:hex
		r.pulls[name]++
	}
	return send(w, req, ManifestMediaType, md, r.content[md])
}

// send writes a 200 with body (headers only for HEAD) and returns 200.
func send(w http.ResponseWriter, req *http.Request, contentType, digest string, body []byte) int {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if digest != "" {
		h.Set("Docker-Content-Digest", digest)
		h.Set("Etag", `"`+digest+`"`)
	}
	w.WriteHeader(http.StatusOK)
	if req.Method != http.MethodHead {
		w.Write(body)
	}
	return http.StatusOK
}

// registryError writes the registry's JSON error body with status and
// returns status.
func registryError(w http.ResponseWriter, status int, code, message string) int {
	body, _ := json.Marshal(map[string]any{"errors": []map[string]any{{"code": code, "message": message, "detail": nil}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// digestOf returns "sha256:<hex>" of b.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mustJSON marshals v, failing t on error.
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	return b
}
