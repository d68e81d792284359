package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// recordVersion is the version of the job record format.
//
// # Version History
//
// 1: first version. Since issue 14 a record may carry "stack" and the
// spec's stack fields (all omitted when empty), and a template job's
// record holds everything to re-adopt its stack without the catalogue:
// the specs, the fused launch config and the config files' contents
// (stack.files, spec stack_files). A worker from before ignores them, so
// do not downgrade a worker running a template job.
const recordVersion = 1

// Phases are the supervisor's (supervisor.Phase): starting, running,
// stopping, failing.

// record is what the runtime keeps about a project (StateDir/jobs/<project>/
// job.json, mode 0600, written atomically on every change) to re-adopt it
// after a worker restart. The containers themselves are found by their
// labels.
type record struct {
	Version   int              `json:"version"`
	JobID     string           `json:"job_id"`
	Role      string           `json:"role"`
	Project   string           `json:"project"`
	Network   string           `json:"network,omitempty"` // per-project network; "" with host networking
	Stack     *stackSpec       `json:"stack,omitempty"`   // a stack's volumes and networks; nil for a legacy job
	Phase     supervisor.Phase `json:"phase"`
	StopGrace time.Duration    `json:"stop_grace,omitempty"` // of the stop in progress
	// FailReason is set while the job is being stopped because it failed.
	FailReason string          `json:"fail_reason,omitempty"`
	Job        json.RawMessage `json:"job"`      // current WorkerJob, protojson
	Services   []serviceRecord `json:"services"` // in start order
}

// serviceRecord is one service's spec and container.
type serviceRecord struct {
	Spec        *serviceSpec `json:"spec"`
	ContainerID string       `json:"container_id,omitempty"`
	Restarts    []time.Time  `json:"restarts,omitempty"` // within the restart window
	Completed   bool         `json:"completed,omitempty"`
}

func (rec *record) key() worker.JobKey {
	return worker.JobKey{JobID: worker.JobID(rec.JobID), Role: rec.Role}
}

func (rec *record) job() (*workerpb.WorkerJob, error) {
	job := &workerpb.WorkerJob{}
	if err := protojson.Unmarshal(rec.Job, job); err != nil {
		return nil, fmt.Errorf("decode job definition: %w", err)
	}
	return job, nil
}

func writeRecord(path string, rec *record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode job record: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("write job record: %w", err)
	}
	return nil
}

func readRecord(path string) (*record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rec := &record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("decode job record %s: %w", path, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("job record %s has version %d; this worker reads version %d", path, rec.Version, recordVersion)
	}
	return rec, nil
}
