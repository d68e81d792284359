package storecrash

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// iterations is the CI round per store and kind set; STORECRASH_ITERATIONS
// overrides it (go run ./test/bench storecrash runs longer rounds).
func iterations(t *testing.T) int {
	if s := os.Getenv("STORECRASH_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("STORECRASH_ITERATIONS=%q: %v", s, err)
		}
		return n
	}
	return 20
}

// TestStoreCrash_SIGKILL: a process writing synced appends to a single
// manager's store, and one writing a cluster member's Raft log store, are
// SIGKILLed 20 times each at random instants (a random delay after the
// start, so also during the store's open, or after a random number of
// acknowledged writes) and 20 times each at the exact system calls that
// left the zero-length log (strace fault injection: badger sizing
// a log it just created, unlinking a log it just truncated; skipped
// without strace). Every restart must open the store the first time and
// find every write acknowledged before any of the kills.
func TestStoreCrash_SIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILLs a writer process 80 times (about two minutes)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := BuildWriter(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []Store{FSM, Raft} {
		for _, kinds := range [][]string{{KindDelay, KindAcks}, {KindInject, KindAcks}} {
			t.Run(string(store)+"/"+kinds[0], func(t *testing.T) {
				if kinds[0] == KindInject {
					if _, err := exec.LookPath("strace"); err != nil {
						t.Skip("killing at exact system calls needs strace (apt-get install strace): not found on PATH")
					}
				}
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				start := time.Now()
				res, err := Run(ctx, Config{
					Writer: bin, Store: store, Dir: filepath.Join(t.TempDir(), "data"), Iterations: iterations(t), Kinds: kinds, Seed: seed, Logf: t.Logf,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d kills %v (injected at %v), %d restarts all opened the first time, %d acknowledged writes all present; "+
					"%d kills left %d empty logs (crash windows hit), %d left a torn log entry (all reopened); slowest open %s; took %s",
					sum(res.Kills), res.Kills, res.Injected, res.Restarts, res.Acked, res.EmptyLogKills, res.EmptyLogs, res.TornLogKills,
					res.SlowestOpen.Round(time.Millisecond), time.Since(start).Round(time.Second))
				if kinds[0] == KindInject && res.EmptyLogKills == 0 {
					t.Errorf("no injected kill left an empty log: the injection no longer reaches the crash windows (badger's file names or calls changed?)")
				}
			})
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
