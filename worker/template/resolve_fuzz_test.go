package template

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// FuzzResolve feeds Resolve the job fields an operator controls — one
// product_template_parameters entry over the template's .env, and the two
// launch-config tiers — against a template that interpolates the variable
// into its image, command, environment, ports and shm_size. It must never
// panic; a refusal wraps worker.ErrInvalidJob; an accepted stack's launch
// config is valid JSON, the same in every service's NORSK_LAUNCH_CONFIG,
// and the same bytes when resolved again.
func FuzzResolve(f *testing.F) {
	dir := f.TempDir()
	writeVersion(f, dir, "t", "1", map[string]string{
		ComposeFile: "services:\n  web:\n    image: example/probe:${TAG:-1}\n    command: [\"/probe\", \"${ARG:-serve}\"]\n" +
			"    environment: {V: \"${V:-v}\", W: \"${TAG}-${ARG}\"}\n    ports: [\"${PORT:-8080}:8080\"]\n    shm_size: \"${SHM:-1m}\"\n" +
			"  api:\n    image: example/probe:1\n    depends_on: {web: {condition: service_started}}\n",
		EnvFile:      "TAG=1\nDERIVED=${TAG}-x\n",
		MetadataFile: `{"launchDefaults": {"a": {"b": 1}}}`,
	})
	c, err := LoadCatalogue(context.Background(), dir, quietLogger())
	if err != nil || len(c.Offers()) != 1 {
		f.Fatalf("catalogue: %v %v", err, c.Refused())
	}
	f.Add("TAG", "2", `{"a": {"c": 2}}`, `{"a": null}`)
	f.Add("PORT", "8000-8001", "", "")
	f.Add("SHM", "lots", `[1]`, `{"x": 1e400}`)
	f.Add("A=B", "x", `{`, `}`)
	f.Add("ARG", "$${V}", `"s"`, `null`)
	f.Fuzz(func(t *testing.T, key, value, author, operator string) {
		j := job("t", "1", map[string]string{key: value})
		j.TemplateLaunchDefaultsJson, j.LaunchConfigJson = &author, &operator
		st, err := c.Resolve(context.Background(), j)
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidJob) {
				t.Fatalf("refusal %v does not wrap ErrInvalidJob", err)
			}
			return
		}
		if !json.Valid(st.LaunchConfig) {
			t.Fatalf("launch config %q is not JSON", st.LaunchConfig)
		}
		for _, s := range st.Services {
			if !contains(s.Environment, LaunchConfigEnv+"="+string(st.LaunchConfig)) {
				t.Fatalf("service %s: environment %v lacks the launch config", s.Name, s.Environment)
			}
			for _, e := range s.Environment {
				if !strings.Contains(e, "=") {
					t.Fatalf("service %s: environment entry %q is not K=V", s.Name, e)
				}
			}
		}
		again, err := c.Resolve(context.Background(), j)
		if err != nil || !bytes.Equal(again.LaunchConfig, st.LaunchConfig) {
			t.Fatalf("second Resolve: %v, launch config %s then %s", err, st.LaunchConfig, again.LaunchConfig)
		}
	})
}
