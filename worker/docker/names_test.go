package docker

import (
	"regexp"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// dockerNameRE is the engine's rule for container, network and volume
// names.
var dockerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func TestNames(t *testing.T) {
	keys := []worker.JobKey{
		{JobID: "hello-docker", Role: "primary"},
		{JobID: "a b/c:d", Role: "backup"},
		{JobID: "a_b_c_d", Role: "backup"}, // sanitises like the one above
		{JobID: worker.JobID(strings.Repeat("x", 300)), Role: "ünïcode"},
	}
	seen := map[string]worker.JobKey{}
	for _, k := range keys {
		p := projectName("0123456789abcdef", k)
		for _, n := range []string{p, containerName(p, "web server"), volumeName("0123456789abcdef", k, "data/1")} {
			if !dockerNameRE.MatchString(n) || len(n) > 200 {
				t.Errorf("%q (for %v) is not a usable Docker name", n, k)
			}
		}
		if other, dup := seen[p]; dup {
			t.Errorf("%v and %v share project %s", k, other, p)
		}
		seen[p] = k
	}
	if p := projectName("0123456789abcdef", keys[0]); !strings.Contains(p, "hello-docker-primary") {
		t.Errorf("project %s does not read as its job and role", p)
	}
}
