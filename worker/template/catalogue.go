package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// The files of one template version, in NAME/VERSION/.
const (
	ComposeFile  = "compose.yaml"
	EnvFile      = ".env"
	MetadataFile = "template.json"
)

// namePattern is the charset of template names and versions: a letter or
// digit, then letters, digits, '.', '_', '-', at most 64 in all; ".." is
// refused anywhere. No '/', so a name is one directory and cannot climb.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName returns an error (naming what and why) if s is not a valid
// template name or version; what is "name" or "version".
func ValidName(what, s string) error {
	if !namePattern.MatchString(s) || strings.Contains(s, "..") {
		return fmt.Errorf("template %s %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, without \"..\"", what, s)
	}
	return nil
}

// Catalogue is the set of template versions a worker offers. It is loaded
// once, at worker start (LoadCatalogue), and not re-read: a template added
// or changed on disk is offered after the worker restarts. The compose
// file, .env and template.json are kept in memory as loaded; env_file and
// configs files are read when a job is resolved. Safe for concurrent use
// (read-only once loaded).
type Catalogue struct {
	dir      string
	versions map[string]map[string]*version // name → version → template
	refused  []*RefusalError
}

// version is one loaded template version.
type version struct {
	name, version string
	dir           string // absolute
	compose       []byte
	dotEnv        []byte // nil: no .env
	meta          Metadata
}

// LoadCatalogue loads every NAME/VERSION of dir. A version that cannot be
// offered (bad name, no compose.yaml, a key outside the allow-list, a bad
// .env or template.json, a compose file compose-go refuses) is left out
// and logged at warn with the file and the key path; Refused lists them.
// Entries that are not directories are skipped (logged at debug). The
// error is returned only when dir itself cannot be read (wrapped
// *fs.PathError): the caller treats that as fatal. logger nil: text to
// stderr.
func LoadCatalogue(ctx context.Context, dir string, logger *slog.Logger) (*Catalogue, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("template directory %s: %w", dir, err)
	}
	names, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("template directory: %w", err)
	}
	c := &Catalogue{dir: abs, versions: map[string]map[string]*version{}}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.loadName(ctx, logger, n)
	}
	for _, o := range c.Offers() {
		logger.Info("template offered", "template", o.GetName(), "versions", o.GetVersions())
	}
	return c, nil
}

func (c *Catalogue) loadName(ctx context.Context, logger *slog.Logger, n fs.DirEntry) {
	path := filepath.Join(c.dir, n.Name())
	if !isDir(path, n) {
		logger.Debug("template directory entry skipped: not a directory", "path", path)
		return
	}
	if err := ValidName("name", n.Name()); err != nil {
		c.refuse(logger, &RefusalError{Name: n.Name(), File: path, Err: fmt.Errorf("%w: %w", ErrBadTemplate, err)})
		return
	}
	vers, err := os.ReadDir(path)
	if err != nil {
		c.refuse(logger, &RefusalError{Name: n.Name(), File: path, Err: fmt.Errorf("%w: %w", ErrBadTemplate, err)})
		return
	}
	for _, v := range vers {
		vpath := filepath.Join(path, v.Name())
		if !isDir(vpath, v) {
			logger.Debug("template directory entry skipped: not a directory", "path", vpath)
			continue
		}
		tv, rerr := loadVersion(ctx, n.Name(), v.Name(), vpath)
		if rerr != nil {
			c.refuse(logger, rerr)
			continue
		}
		if c.versions[tv.name] == nil {
			c.versions[tv.name] = map[string]*version{}
		}
		c.versions[tv.name][tv.version] = tv
	}
}

func (c *Catalogue) refuse(logger *slog.Logger, r *RefusalError) {
	c.refused = append(c.refused, r)
	logger.Warn("template version refused, not offered", "template", r.Name, "version", r.Version,
		"file", r.File, "key", r.KeyPath, "error", r.Err)
}

// isDir follows a symlink (a catalogue may link versions).
func isDir(path string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// loadVersion reads and checks one NAME/VERSION directory.
func loadVersion(ctx context.Context, name, ver, dir string) (*version, *RefusalError) {
	refuse := func(file, key string, err error) *RefusalError {
		return &RefusalError{Name: name, Version: ver, File: file, KeyPath: key, Err: err}
	}
	bad := func(file string, err error) *RefusalError {
		return refuse(file, "", fmt.Errorf("%w: %w", ErrBadTemplate, err))
	}
	if err := ValidName("version", ver); err != nil {
		return nil, bad(dir, err)
	}
	tv := &version{name: name, version: ver, dir: dir}
	composePath := filepath.Join(dir, ComposeFile)
	var err error
	if tv.compose, err = readFile(composePath); err != nil {
		return nil, bad(composePath, err)
	}
	if path, reason, err := checkComposeKeys(tv.compose); err != nil {
		return nil, bad(composePath, err)
	} else if path != "" {
		return nil, refuse(composePath, path, fmt.Errorf("%w: %s", ErrKeyNotAllowed, reason))
	}
	envPath := filepath.Join(dir, EnvFile)
	if tv.dotEnv, err = readFile(envPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, bad(envPath, err)
	}
	defaults, err := parseDotEnv(tv.dotEnv, blankLookup{})
	if err != nil {
		return nil, bad(envPath, err)
	}
	metaPath := filepath.Join(dir, MetadataFile)
	if raw, err := readFile(metaPath); err == nil {
		if tv.meta, err = ParseMetadata(raw); err != nil {
			return nil, bad(metaPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, bad(metaPath, err)
	}
	if err := tv.validateCompose(ctx, defaults); err != nil {
		return nil, bad(composePath, err)
	}
	return tv, nil
}

// checkComposeKeys decodes every YAML document of a compose file and
// returns the first key outside the allow-list; err for YAML that does not
// parse.
func checkComposeKeys(content []byte) (path, reason string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(content))
	for {
		var doc any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return "", "", nil
		} else if err != nil {
			return "", "", fmt.Errorf("YAML: %w", err)
		}
		if path, reason := checkAllowed(doc); path != "" {
			return path, reason, nil
		}
	}
}

// validateCompose has compose-go load the raw model, without
// interpolation (variables are a job's), so that its schema check runs at
// load. Required variables are checked per job (Resolve).
func (tv *version) validateCompose(ctx context.Context, env map[string]string) error {
	model, err := loader.LoadModelWithContext(ctx, tv.details(env), func(o *loader.Options) {
		o.SkipInterpolation = true
		o.SkipResolveEnvironment = true
		o.SetProjectName(projectPlaceholder, true)
	})
	if err != nil {
		return err
	}
	if services, _ := model["services"].(map[string]any); len(services) == 0 {
		return errors.New("no services")
	}
	return nil
}

// projectPlaceholder is the compose project name given to compose-go,
// which requires one; the runtime names the real projects (one per job
// and role), and the file's own name: is ignored.
const projectPlaceholder = "norsk-template"

func (tv *version) details(env map[string]string) types.ConfigDetails {
	return types.ConfigDetails{
		WorkingDir:  tv.dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(tv.dir, ComposeFile), Content: tv.compose}},
		Environment: env,
	}
}

// parseDotEnv parses a .env file with compose-go's dotenv parser. ${VAR}
// in its values is looked up in the file's earlier lines, then in lookup
// — never in the worker's own environment.
func parseDotEnv(content []byte, lookup varLookup) (map[string]string, error) {
	if content == nil {
		return map[string]string{}, nil
	}
	return dotenv.UnmarshalBytesWithLookup(content, lookup.lookup)
}

// varLookup looks interpolation variables up.
type varLookup interface{ lookup(k string) (string, bool) }

// mapLookup finds the variables of a map (the job's parameters).
type mapLookup map[string]string

func (m mapLookup) lookup(k string) (string, bool) { v, ok := m[k]; return v, ok }

// blankLookup finds every variable, blank: to check a .env's syntax at
// load without compose-go warning (on stderr) about each variable a job
// would set.
type blankLookup struct{}

func (blankLookup) lookup(string) (string, bool) { return "", true }

// Dir is the catalogue's directory (absolute).
func (c *Catalogue) Dir() string { return c.dir }

// Refused lists the template versions left out at load, in the order met.
func (c *Catalogue) Refused() []*RefusalError { return append([]*RefusalError(nil), c.refused...) }

// Offers returns the catalogue as the worker reports it in its hello
// (NodeResources.templates): names sorted, each name's versions sorted
// (compareVersions). Empty catalogue: nil.
func (c *Catalogue) Offers() []*commonpb.ProductTemplateOffer {
	if c == nil {
		return nil
	}
	var out []*commonpb.ProductTemplateOffer
	for _, name := range sortedNames(c.versions) {
		out = append(out, &commonpb.ProductTemplateOffer{Name: name, Versions: c.sortedVersions(name)})
	}
	return out
}

func (c *Catalogue) sortedVersions(name string) []string {
	vs := make([]string, 0, len(c.versions[name]))
	for v := range c.versions[name] {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return compareVersions(vs[i], vs[j]) < 0 })
	return vs
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// compareVersions orders versions by their '.'/'-'/'_'-separated parts,
// numeric parts numerically (1.9 < 1.10), others as strings, a prefix
// before a longer version (1 < 1.0); the whole strings break ties.
func compareVersions(a, b string) int {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '_' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.ParseUint(pa[i], 10, 64)
		nb, eb := strconv.ParseUint(pb[i], 10, 64)
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case ea == nil && eb != nil:
			return -1 // numbers before words
		case ea != nil && eb == nil:
			return 1
		case pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	if len(pa) != len(pb) {
		return len(pa) - len(pb)
	}
	return strings.Compare(a, b)
}
