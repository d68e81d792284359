package robustness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

func TestMain(m *testing.M) {
	// The managers are separate processes; what may leak here is the test
	// side: the clients and their connections.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testproc.RemoveBin()
		os.Exit(code)
	}))
}

// TestRobustness_JobCASLinearizableUnderFaults is the short CI run of the
// robustness suite (issue 15): six clients, two bound to each of three
// managers, read, compare-and-set, create and delete five jobs for about
// a minute while the nemesis freezes a follower (SIGSTOP 8 s, then the
// clients bound to it write through it at once), SIGKILLs and restarts
// the leader, freezes the leader and — as root with iptables — cuts a
// follower off. The history must be linearizable per job, every manager
// must acknowledge an UpdateJob of every job within 30 s of the last
// heal, and the final reads through every manager must agree and keep
// every acknowledged write.
//
// On failure the porcupine visualisation and the history are written to
// $NORSK_ROBUSTNESS_OUT, to the test's artifact directory with go test
// -artifacts, or else under the system temp dir; the summary names the
// job and the operations that cannot be linearized.
func TestRobustness_JobCASLinearizableUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of real managers under faults for about a minute")
	}
	out := outDir(t)
	rep, err := Run(context.Background(), t, Config{Schedule: CISchedule(true), Partitions: true, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("robustness run failed (seed %d; rerun with the same seed for the same choices, not the same timing):\n%s", rep.Seed, rep.Summary())
	}
	t.Logf("robustness run passed:\n%s", rep.Summary())
}

// outDir is where a failing run's files go: $NORSK_ROBUSTNESS_OUT, the
// artifact directory when go test runs with -artifacts, or a fresh path
// under the system temp dir (created only when something is written).
func outDir(t *testing.T) string {
	if d := os.Getenv("NORSK_ROBUSTNESS_OUT"); d != "" {
		return d
	}
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("norsk-robustness-%s-%d", time.Now().Format("20060102-150405"), os.Getpid()))
}
