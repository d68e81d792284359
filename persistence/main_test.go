package persistence

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// store, log and raft node a test starts must be closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
