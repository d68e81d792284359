package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/worker/process"
)

// jobDirSuffix makes the default --job-dir from --state-dir: a sibling,
// outside the state directory (/var/lib/norsk-worker-jobs next to
// /var/lib/norsk-worker).
const jobDirSuffix = "-jobs"

// addJobUserFlags adds --job-user and --job-dir, the process runtime's
// isolation of jobs from the worker (docs/design/security.md, "What a job
// can reach").
func addJobUserFlags(cmd *cobra.Command, o *workerOptions) {
	f := cmd.Flags()
	f.StringVar(&o.jobUser, "job-user", "",
		"worker mode, --runtime=process: the user (name or uid) services run as when the worker runs as root, so that they cannot read the node credential "+
			"or TLS key in --state-dir (default "+process.DedicatedJobUser+" if that user exists, else "+process.FallbackJobUser+"; a user that does not exist is refused). "+
			"Naming root runs jobs as root, with access to everything the worker has. A worker not running as root cannot change user: its jobs run as its own user")
	f.StringVar(&o.jobDir, "job-dir", "",
		"worker mode, --runtime=process: directory of the services' working directories, one per job, outside --state-dir and reachable by --job-user "+
			"(default: --state-dir with \""+jobDirSuffix+"\" appended, e.g. /var/lib/norsk-worker"+jobDirSuffix+")")
}

// jobIsolation is how the process runtime runs jobs: as user (nil: the
// worker's own user) in working directories under dir; warning, when
// set, is logged at start (jobs can read the worker's secrets).
type jobIsolation struct {
	user    *process.JobUser
	dir     string
	warning string
}

// jobIsolation resolves --job-user and --job-dir for a worker with
// stateDir, running as euid. Errors name the flag (a usage error).
func (o *workerOptions) jobIsolation(stateDir string, euid int) (jobIsolation, error) {
	if o.runtime != "process" {
		if o.jobUser != "" || o.jobDir != "" {
			return jobIsolation{}, errors.New("--job-user and --job-dir need --runtime=process: containers run as their image's user, and never see --state-dir")
		}
		return jobIsolation{}, nil
	}
	iso := jobIsolation{dir: o.jobDir}
	if iso.dir == "" {
		iso.dir = filepath.Clean(stateDir) + jobDirSuffix
	}
	absState, errState := filepath.Abs(stateDir)
	absJobs, errJobs := filepath.Abs(iso.dir)
	if err := errors.Join(errState, errJobs); err != nil {
		return jobIsolation{}, fmt.Errorf("--job-dir: %w", err)
	}
	if process.Within(absState, absJobs) {
		return jobIsolation{}, fmt.Errorf("--job-dir %s is inside --state-dir %s: the jobs must stay out of the state directory, which holds the node credential", iso.dir, stateDir)
	}
	var u *process.JobUser
	var err error
	switch {
	case o.jobUser != "":
		u, err = process.LookupJobUser(o.jobUser)
	case euid == 0:
		u, err = process.DefaultJobUser()
	}
	if err != nil {
		return jobIsolation{}, fmt.Errorf("--job-user: %w", err)
	}
	switch {
	case u != nil && int(u.UID) == euid:
		// The worker's own user: nothing to change.
		iso.warning = fmt.Sprintf("--job-user %s is the worker's own user: jobs can read everything the worker can, the node credential and TLS key included", u)
	case euid != 0 && u != nil:
		return jobIsolation{}, fmt.Errorf("--job-user %s: running jobs as another user needs root, and this worker runs as uid %d (leave --job-user out to run them as the worker's user)", u, euid)
	case euid != 0:
		iso.warning = fmt.Sprintf("the worker does not run as root (uid %d), so its jobs run as its own user and can read its --state-dir (the node credential, the TLS key); "+
			"run the worker as root to run jobs as --job-user", euid)
	default:
		iso.user = u
	}
	return iso, nil
}

// checkSecretsHidden returns a usage error if the job user may read a
// secret the worker holds outside its state directory (--tls-key).
func (iso jobIsolation) checkSecretsHidden(tlsKey string) error {
	if iso.user == nil || tlsKey == "" {
		return nil
	}
	readable, err := iso.user.CanAccess(tlsKey, process.AccessRead)
	if err != nil {
		return fmt.Errorf("--tls-key: %w", err)
	}
	if readable {
		return fmt.Errorf("--tls-key %s is readable by the job user %s: jobs could take the worker's TLS identity; make it readable by the worker's user only (chmod 0600, chown to that user)", tlsKey, iso.user)
	}
	return nil
}

// log reports at start how jobs run.
func (iso jobIsolation) log(logger *slog.Logger) {
	if iso.warning != "" {
		logger.Warn(iso.warning)
	}
	if iso.user != nil {
		logger.Info("jobs run as the job user", "job_user", iso.user.Name, "uid", iso.user.UID, "job_dir", iso.dir)
	}
}

// jobEnviron returns the worker's environment env ("KEY=value" entries) as
// the base environment of its process jobs, less every NORSK_* variable:
// those are the worker's own settings and credentials (NORSK_TOKEN,
// NORSK_TOKEN_FILE, NORSK_CLIENT_KEY, NORSK_MANAGER_URL, ...), which a job
// must not read (docs/design/security.md, "What a job can reach"); the
// runtime sets the job's own NORSK_* variables on top. The order of the
// other entries is kept.
func jobEnviron(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "NORSK_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
