//go:build linux

package process

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
)

// Environment of the helper mode of the test binary: a "worker" that
// starts one job and then dies without shutting its runtime down, so that
// a test can re-adopt processes it is not the parent of.
const (
	helperEnv    = "NORSK_PROCESS_TEST_HELPER"
	helperDirEnv = "NORSK_PROCESS_TEST_DIR"
	helperJobEnv = "NORSK_PROCESS_TEST_JOB"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(m)
}

// helperMain starts the job in $NORSK_PROCESS_TEST_JOB over
// $NORSK_PROCESS_TEST_DIR, prints "started" and exits abruptly.
func helperMain() int {
	job := &workerpb.WorkerJob{}
	if err := protojson.Unmarshal([]byte(os.Getenv(helperJobEnv)), job); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	cfg := DevConfig()
	cfg.StateDir = os.Getenv(helperDirEnv)
	cfg.Environ = os.Environ()
	r, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	if err := r.Restore(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	events := r.Events()
	ctx := context.Background()
	errCh := make(chan error, 1)
	go func() { // drained below; the helper process exits right after
		_, err := r.Start(ctx, job)
		errCh <- err
	}()
	for {
		select {
		case <-events:
		case err := <-errCh:
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return 2
			}
			fmt.Println("started")
			return 0 // no Shutdown: the worker "crashes"
		}
	}
}
