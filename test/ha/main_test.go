// Package ha holds the functional fault tests of the HA manager cluster
// (docs/design/ha.md): real norsk-manager processes on loopback, started,
// SIGKILLed, SIGTERMed and restarted through test/testproc, with clients
// that record what was acknowledged and checks that every acknowledged
// write survives on every manager exactly once.
//
// The tests take minutes, not seconds: they are skipped under -short.
package ha

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

func TestMain(m *testing.M) {
	// The managers are separate processes; what may leak here is the test
	// side: clients, event streams, load goroutines.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testproc.RemoveBin()
		os.Exit(code)
	}))
}
