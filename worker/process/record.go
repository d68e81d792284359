package process

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
	"google.golang.org/protobuf/encoding/protojson"
)

// recordVersion is the version of the job record format.
//
// # Version History
//
// 1: first version. Since issue 21 a record may say where its services
// run (work_dir, outside the state directory) and as whom (user); a
// record without them is an older worker's, whose services run in
// <job dir>/work as the worker's user. A worker from before reads such a
// record but restarts services in <job dir>/work as itself: do not
// downgrade a worker with running jobs. Since the shared supervisor (issue 14) a failing job
// is recorded as phase "failing" (it was "stopping" with a fail_reason,
// which is still read as failing); a worker from before reads "failing"
// as running, so do not downgrade a worker with a failing job.
const recordVersion = 1

// Phases are the supervisor's (supervisor.Phase). A record of an older
// worker says "stopping" with a FailReason for a failing job: restore
// reads it as failing.

// record is what the runtime keeps about a job in its directory (job.json,
// mode 0600, written atomically on every change) to re-adopt it after a
// worker restart.
type record struct {
	Version   int              `json:"version"`
	JobID     string           `json:"job_id"`
	Role      string           `json:"role"`
	Phase     supervisor.Phase `json:"phase"`
	StopGrace time.Duration    `json:"stop_grace,omitempty"` // of the stop in progress
	// FailReason is set while the job is being stopped because it failed.
	FailReason string          `json:"fail_reason,omitempty"`
	Job        json.RawMessage `json:"job"`      // current WorkerJob, protojson
	Services   []serviceRecord `json:"services"` // in start order
	// WorkDir is the services' working directory (Config.JobDir's, or
	// the job directory's work/); empty in a record of a worker from
	// before JobDir, whose services ran in <job dir>/work.
	WorkDir string `json:"work_dir,omitempty"`
	// User is the user the services run as; nil: the worker's own user
	// (and every record of a worker from before JobUser).
	User *JobUser `json:"user,omitempty"`
}

// serviceRecord is one service's launch spec and current process.
type serviceRecord struct {
	Spec       *serviceSpec `json:"spec"`
	PID        int          `json:"pid,omitempty"` // 0: not running
	StartTicks uint64       `json:"start_ticks,omitempty"`
	Restarts   []time.Time  `json:"restarts,omitempty"` // within the restart window
	Completed  bool         `json:"completed,omitempty"`
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
		return fmt.Errorf("save job record: %w", err)
	}
	return nil
}

func readRecord(path string) (*record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read job record: %w", err)
	}
	rec := &record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("decode job record %s: %w", path, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("job record %s has version %d; this worker reads version %d", path, rec.Version, recordVersion)
	}
	for i, s := range rec.Services {
		if s.Spec == nil || s.Spec.Name == "" {
			return nil, fmt.Errorf("job record %s: services[%d] has no spec", path, i)
		}
	}
	return rec, nil
}

// jobPaths are the files and directories of one (job, role):
//
//	<StateDir>/jobs/<job dir>/job.json      the record
//	<StateDir>/jobs/<job dir>/work/         services' working directory (write_files), without a JobDir
//	<JobDir>/<job dir>/                     services' working directory, with a JobDir (work is set then)
//	<StateDir>/jobs/<job dir>/logs/<svc>.stdout.log, <svc>.stderr.log
//	<StateDir>/jobs/<job dir>/run/<svc>.exit  exit status, written by the wrapper to the descriptor it inherits
//
// Only the working directory is the job's: the record, logs and exit
// files stay in the state directory, out of the job user's reach (a job
// that could swap its log for a link would have the worker read, or
// append to, any file).
type jobPaths struct {
	root, record, work, logs, run string
}

func newJobPaths(jobsDir string, key worker.JobKey) jobPaths {
	root := filepath.Join(jobsDir, safeName(string(key.JobID)+"."+key.Role, string(key.JobID)+"\x00"+key.Role))
	return jobPaths{
		root:   root,
		record: filepath.Join(root, "job.json"),
		work:   filepath.Join(root, "work"),
		logs:   filepath.Join(root, "logs"),
		run:    filepath.Join(root, "run"),
	}
}

func (p jobPaths) stdout(svc string) string {
	return filepath.Join(p.logs, safeName(svc, svc)+".stdout.log")
}

func (p jobPaths) stderr(svc string) string {
	return filepath.Join(p.logs, safeName(svc, svc)+".stderr.log")
}

func (p jobPaths) exit(svc string) string { return filepath.Join(p.run, safeName(svc, svc)+".exit") }

// dirs returns the directories to remove with the job: its directory,
// and its working directory when that is elsewhere.
func (p jobPaths) dirs() []string {
	if Within(p.root, p.work) {
		return []string{p.root}
	}
	return []string{p.root, p.work}
}

func (p jobPaths) mkdirs() error {
	for _, d := range []string{p.root, p.work, p.logs, p.run} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create job directory: %w", err)
		}
	}
	return nil
}

// safeName turns name into a file name: characters other than letters,
// digits, '.', '_' and '-' become '_', it is cut to 48 bytes, and a hash
// of the unique string keeps different names apart.
func safeName(name, unique string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == '.' && b.Len() > 0:
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 48 {
			break
		}
	}
	sum := sha256.Sum256([]byte(unique))
	return b.String() + "-" + hex.EncodeToString(sum[:5])
}
