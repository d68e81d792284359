package template

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const minimalCompose = "services:\n  web:\n    image: example/probe:1\n"

func TestLoadCatalogue_OffersSorted(t *testing.T) {
	dir := t.TempDir()
	for _, nv := range [][2]string{{"b", "2"}, {"a", "1.10"}, {"a", "1.9"}, {"a", "1.0"}, {"a", "1"}} {
		writeVersion(t, dir, nv[0], nv[1], map[string]string{ComposeFile: minimalCompose})
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not a template"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustLoad(t, dir)
	var got [][]string
	for _, o := range c.Offers() {
		got = append(got, append([]string{o.GetName()}, o.GetVersions()...))
	}
	want := [][]string{{"a", "1", "1.0", "1.9", "1.10"}, {"b", "2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("offers %v, want %v", got, want)
	}
	if len(c.Refused()) != 0 {
		t.Fatalf("refused %v", c.Refused())
	}
}

func TestLoadCatalogue_EveryAllowedKeyLoads(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "all", "1", map[string]string{
		ComposeFile: allowedCompose, "app.env": "X=1\n", "cfg.txt": "c", "conf/a": "a",
	})
	c := mustLoad(t, dir)
	if len(c.Refused()) != 0 {
		t.Fatalf("refused: %v", c.Refused()[0])
	}
}

func TestLoadCatalogue_RefusedVersions(t *testing.T) {
	cases := []struct {
		name, tmpl, version string
		files               map[string]string
		wantErr             error
		wantFile            string
	}{
		{"no compose.yaml", "t", "1", map[string]string{"compose.yml": minimalCompose}, ErrBadTemplate, ComposeFile},
		{"bad YAML", "t", "1", map[string]string{ComposeFile: "services: [\n"}, ErrBadTemplate, ComposeFile},
		{"schema refused by compose-go", "t", "1", map[string]string{ComposeFile: "services:\n  web:\n    image: [1]\n"}, ErrBadTemplate, ComposeFile},
		{"no services", "t", "1", map[string]string{ComposeFile: "name: x\n"}, ErrBadTemplate, ComposeFile},
		{"key outside the allow-list", "t", "1", map[string]string{ComposeFile: minimalCompose + "    cap_add: [ALL]\n"}, ErrKeyNotAllowed, ComposeFile},
		{"template.json unknown field", "t", "1", map[string]string{ComposeFile: minimalCompose, MetadataFile: `{"launchDefault": {}}`}, ErrBadTemplate, MetadataFile},
		{"template.json launchDefaults not an object", "t", "1", map[string]string{ComposeFile: minimalCompose, MetadataFile: `{"launchDefaults": [1]}`}, ErrBadTemplate, MetadataFile},
		{"template.json bad required name", "t", "1", map[string]string{ComposeFile: minimalCompose, MetadataFile: `{"requiredParameters": ["A-B"]}`}, ErrBadTemplate, MetadataFile},
		{"template.json trailing data", "t", "1", map[string]string{ComposeFile: minimalCompose, MetadataFile: `{} {}`}, ErrBadTemplate, MetadataFile},
		{"bad .env", "t", "1", map[string]string{ComposeFile: minimalCompose, EnvFile: "A='unterminated\n"}, ErrBadTemplate, EnvFile},
		{"bad version", "t", "-1", map[string]string{ComposeFile: minimalCompose}, ErrBadTemplate, "-1"},
		{"bad name", "t+t", "1", map[string]string{ComposeFile: minimalCompose}, ErrBadTemplate, "t+t"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeVersion(t, dir, tc.tmpl, tc.version, tc.files)
			writeVersion(t, dir, "good", "1", map[string]string{ComposeFile: minimalCompose})
			c := mustLoad(t, dir)
			if o := c.Offers(); len(o) != 1 || o[0].GetName() != "good" {
				t.Fatalf("offers %v, want only good", o)
			}
			r := c.Refused()
			if len(r) != 1 || !errors.Is(r[0], tc.wantErr) || !strings.HasSuffix(r[0].File, tc.wantFile) {
				t.Fatalf("refused %v, want one %v naming %s", r, tc.wantErr, tc.wantFile)
			}
		})
	}
}

func TestLoadCatalogue_UnreadableDirIsAnError(t *testing.T) {
	_, err := LoadCatalogue(context.Background(), filepath.Join(t.TempDir(), "missing"), quietLogger())
	var pathErr *fs.PathError
	if !errors.As(err, &pathErr) {
		t.Fatalf("err %v, want a *fs.PathError", err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"hello", "1.0", "v2_beta-1", "A"} {
		if err := ValidName("version", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a..b", ".hidden", "-x", "a/b", "a b", "é", strings.Repeat("a", 65)} {
		if err := ValidName("name", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"1", "1.0", -1}, {"1.9", "1.10", -1}, {"2", "10", -1}, {"1.0", "1.0", 0},
		{"1.0", "1.0-rc1", -1}, {"1.0-beta", "1.0-rc", -1}, {"1.a", "1.1", 1},
	}
	for _, tc := range cases {
		got := compareVersions(tc.a, tc.b)
		if (got < 0) != (tc.want < 0) || (got > 0) != (tc.want > 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
		back := compareVersions(tc.b, tc.a)
		if (back < 0) != (tc.want > 0) || (back > 0) != (tc.want < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, not antisymmetric", tc.b, tc.a, back)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	m, err := ParseMetadata([]byte(`{"description": "d", "requiredParameters": ["A", "_B1"], "launchDefaults": {"x": 1}}`))
	if err != nil || m.Description != "d" || len(m.RequiredParameters) != 2 || string(m.LaunchDefaults) != `{"x": 1}` {
		t.Fatalf("got %+v, %v", m, err)
	}
}
