package template

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestResolve_HostileParameterValues: parameter values are data — a
// newline, '$', YAML syntax reach the containers verbatim and change no
// key; a value no environment variable or argument can hold (a NUL byte,
// more than MaxParameterSize bytes) fails the job naming the parameter and
// why. Before, both resolved and the container failed at exec with the
// kernel's "invalid argument" / "argument list too long", naming nothing.
func TestResolve_HostileParameterValues(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "p", "1", map[string]string{ComposeFile: "services:\n  a:\n    image: x\n    command: [\"echo\", \"${V}\"]\n    environment:\n      E: ${V}\n"})
	c := mustLoad(t, dir)
	cases := []struct {
		name, value, wantErr string
	}{
		{"newline and yaml", "a\nb: c\n  privileged: true", ""},
		{"dollar and shell", "$$ ${X} $(id) `id`", ""},
		{"at the limit", strings.Repeat("y", MaxParameterSize), ""},
		{"nul byte", "a\x00b", `product_template_parameters["V"]: contains a NUL byte`},
		{"too long", strings.Repeat("y", MaxParameterSize+1), `product_template_parameters["V"]: is 131072 bytes; a value must fit`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := c.Resolve(context.Background(), job("p", "1", map[string]string{"V": tc.value}))
			if tc.wantErr != "" {
				if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve: %.300v; want ErrInvalidJob with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := st.Services[0]
			if len(s.Command) != 2 || s.Command[1] != tc.value || !strings.Contains(strings.Join(s.Environment, "\n"), "E="+tc.value) {
				t.Fatalf("command %.200q env %.200q; want the value verbatim", s.Command, s.Environment)
			}
		})
	}
}

// TestResolve_PortRanges pins what compose-go does with port ranges, which
// the design page described as refused: a host range for one container
// port (compose would pick one host port) fails naming the port; a range
// mapped onto a range of the same length is expanded into one fixed port
// each, as docker compose runs it.
func TestResolve_PortRanges(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "one", "1", map[string]string{ComposeFile: "services:\n  a:\n    image: x\n    ports: [\"8000-8002:80\"]\n"})
	writeVersion(t, dir, "many", "1", map[string]string{ComposeFile: "services:\n  a:\n    image: x\n    ports: [\"127.0.0.1:8000-8002:9000-9002\"]\n"})
	c := mustLoad(t, dir)
	if _, err := c.Resolve(context.Background(), job("one", "1", nil)); !errors.Is(err, worker.ErrInvalidJob) ||
		!strings.Contains(err.Error(), `services.a.ports[0]: published "8000-8002"`) {
		t.Fatalf("host range for one port: %v; want ErrInvalidJob naming services.a.ports[0]", err)
	}
	st, err := c.Resolve(context.Background(), job("many", "1", nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []Port{{HostIP: "127.0.0.1", HostPort: 8000, ContainerPort: 9000, Protocol: "tcp"},
		{HostIP: "127.0.0.1", HostPort: 8001, ContainerPort: 9001, Protocol: "tcp"},
		{HostIP: "127.0.0.1", HostPort: 8002, ContainerPort: 9002, Protocol: "tcp"}}
	if got := st.Services[0].Ports; !slices.Equal(got, want) {
		t.Fatalf("ports %+v, want %+v", got, want)
	}
}
