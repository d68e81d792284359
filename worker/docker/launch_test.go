package docker

import (
	"strings"
	"testing"
	"time"
)

func TestValidateStack(t *testing.T) {
	hc := &healthcheck{Test: []string{"CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"}}
	cases := []struct {
		name  string
		stack *stackSpec
		specs []*serviceSpec
		want  string // "" for valid
	}{
		{"valid", &stackSpec{Networks: []string{"front"}}, []*serviceSpec{
			{Name: "db", Healthcheck: hc, Networks: []networkAttach{{Name: "front", Aliases: []string{"database"}}}},
			{Name: "web", DependsOn: []string{"db"}, Conditions: map[string]string{"db": "service_healthy"}, Binds: []bindMount{{Source: "/srv", Target: "/mnt"}}},
		}, ""},
		{"unknown network", nil, []*serviceSpec{{Name: "a", Networks: []networkAttach{{Name: "x"}}}},
			`service "a": network "x" is not a network of the stack`},
		{"unknown condition", nil, []*serviceSpec{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}, Conditions: map[string]string{"a": "ready"}}},
			`service "b" depends_on "a": `},
		{"condition without dependency", nil, []*serviceSpec{{Name: "a"}, {Name: "b", Conditions: map[string]string{"a": "healthy"}}},
			`which it does not depend on`},
		{"healthy without healthcheck", nil, []*serviceSpec{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}, Conditions: map[string]string{"a": "healthy"}}},
			`"a" has no healthcheck`},
		{"disabled healthcheck", nil, []*serviceSpec{{Name: "a", Healthcheck: &healthcheck{Disable: true}}, {Name: "b", DependsOn: []string{"a"}, Conditions: map[string]string{"a": "healthy"}}},
			`"a" has no healthcheck`},
		{"stack volume", &stackSpec{Volumes: []string{"cache"}}, []*serviceSpec{{Name: "a", Volumes: []volumeMount{{Volume: "cache", Target: "/c"}}}}, ""},
		{"unknown volume", &stackSpec{Volumes: []string{"cache"}}, []*serviceSpec{{Name: "a", Volumes: []volumeMount{{Volume: "data", Target: "/c"}}}},
			`volume "data" is not a volume of the stack`},
		{"relative bind", nil, []*serviceSpec{{Name: "a", Binds: []bindMount{{Source: "srv", Target: "/mnt"}}}},
			`binds[0]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateStack(tc.stack, nil, tc.specs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validateStack: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validateStack = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHealthcheckConfig(t *testing.T) {
	h := &healthcheck{Test: []string{"CMD", "x"}, Interval: time.Second, Timeout: 2 * time.Second, StartPeriod: 3 * time.Second, Retries: 4}
	c := h.config()
	if c.Interval != time.Second || c.Timeout != 2*time.Second || c.StartPeriod != 3*time.Second || c.Retries != 4 || c.Test[1] != "x" {
		t.Errorf("config %+v", c)
	}
	if c := (&healthcheck{Disable: true}).config(); len(c.Test) != 1 || c.Test[0] != "NONE" {
		t.Errorf("disabled: %+v, want NONE", c)
	}
	if (&healthcheck{Disable: true}).watched() || (*healthcheck)(nil).watched() || !h.watched() {
		t.Error("watched() wrong")
	}
}
