package ops

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

func TestMain(m *testing.M) {
	// The managers and workers are separate processes; what may leak here
	// is the test side: clients, event streams, load goroutines.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testproc.RemoveBin()
		os.Exit(code)
	}))
}
