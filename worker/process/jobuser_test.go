//go:build linux

package process

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// needRoot skips tests that change users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root runs services as another user")
	}
}

// nobody returns the nobody user, or skips.
func nobody(t *testing.T) *JobUser {
	t.Helper()
	u, err := LookupJobUser(FallbackJobUser)
	if err != nil {
		t.Skipf("no %s user: %v", FallbackJobUser, err)
	}
	return u
}

// openTempDir returns a fresh temporary directory that every user may
// search, as are the directories above it (t.TempDir makes them 0700).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tmp := filepath.Clean(os.TempDir())
	for d := dir; strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLookupJobUser(t *testing.T) {
	nb := nobody(t)
	for _, tc := range []struct {
		name    string
		wantUID uint32
		wantErr string
		noUser  bool
	}{
		{name: FallbackJobUser, wantUID: nb.UID},
		{name: strconv.Itoa(int(nb.UID)), wantUID: nb.UID}, // a uid
		{name: "root", wantUID: 0},
		{name: "norsk-no-such-user", wantErr: `job user "norsk-no-such-user": no such user`, noUser: true},
		{name: "4000000000", wantErr: `job user "4000000000": no such user`, noUser: true},
		{name: "", wantErr: "the name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := LookupJobUser(tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrNoJobUser) != tc.noUser {
					t.Fatalf("err = %v; want %q (ErrNoJobUser: %v)", err, tc.wantErr, tc.noUser)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.UID != tc.wantUID || len(u.Groups) == 0 {
				t.Errorf("user %+v; want uid %d and at least one group", u, tc.wantUID)
			}
		})
	}
}

func TestDefaultJobUser(t *testing.T) {
	nb := nobody(t)
	u, err := DefaultJobUser()
	if err != nil {
		t.Fatal(err)
	}
	want := nb.Name
	if _, err := user.Lookup(DedicatedJobUser); err == nil {
		want = DedicatedJobUser
	}
	if u.Name != want {
		t.Errorf("default job user %s; want %s", u, want)
	}
}

func TestJobUser_CanAccessAndReach(t *testing.T) {
	needRoot(t)
	nb := nobody(t)
	base := openTempDir(t)
	mk := func(rel string, mode os.FileMode, file bool, uid int) string {
		path := filepath.Join(base, rel)
		var err error
		if file {
			err = os.WriteFile(path, []byte("x"), mode)
		} else {
			err = os.Mkdir(path, mode)
		}
		if err == nil {
			err = os.Chmod(path, mode)
		}
		if err == nil {
			err = os.Chown(path, uid, int(nb.GID))
		}
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	closed := mk("closed", 0o700, false, 0)
	open := mk("open", 0o755, false, 0)
	inClosed := mk("closed/key.pem", 0o644, true, 0)
	cases := []struct {
		path string
		want uint32
		ok   bool
	}{
		{closed, AccessSearch, false},
		{open, AccessSearch, true},
		{open, AccessWrite, false},
		{inClosed, AccessRead, false}, // 0644, but behind a 0700 directory
		{mk("open/secret", 0o600, true, 0), AccessRead, false},
		{mk("open/public", 0o644, true, 0), AccessRead, true},
		{mk("open/group", 0o640, true, 0), AccessRead, true}, // nobody's group
		{mk("open/owned", 0o600, true, int(nb.UID)), AccessRead | AccessWrite, true},
		{mk("open/owner-denied", 0o066, true, int(nb.UID)), AccessRead, false}, // the owner's bits apply to the owner
	}
	for _, tc := range cases {
		ok, err := nb.CanAccess(tc.path, tc.want)
		if err != nil || ok != tc.ok {
			t.Errorf("CanAccess(%s, %o) = %v, %v; want %v", tc.path, tc.want, ok, err, tc.ok)
		}
	}
	if err := nb.Reach(open); err != nil {
		t.Errorf("Reach(%s): %v", open, err)
	}
	err := nb.Reach(filepath.Join(closed))
	if err == nil || !strings.Contains(err.Error(), "may not search "+closed+" (mode 0700, owner uid 0") {
		t.Errorf("Reach(%s) = %v; want it to name the closed directory", closed, err)
	}
	root, _ := LookupJobUser("root")
	if ok, err := root.CanAccess(inClosed, AccessRead|AccessWrite); !ok || err != nil {
		t.Errorf("root CanAccess = %v, %v", ok, err)
	}
}

// TestNew_JobUserChecks: a Runtime with a job user refuses a JobDir the
// job user could not work in, or a job could tamper with, naming it.
func TestNew_JobUserChecks(t *testing.T) {
	needRoot(t)
	nb := nobody(t)
	base := openTempDir(t)
	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	worldWritable := filepath.Join(base, "ww")
	if err := os.Mkdir(worldWritable, 0o777); err != nil || os.Chmod(worldWritable, 0o777) != nil {
		t.Fatal(err)
	}
	notMine := filepath.Join(base, "not-mine")
	if err := os.Mkdir(notMine, 0o755); err != nil || os.Chown(notMine, int(nb.UID), int(nb.GID)) != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		jobDir  string
		wantErr string
	}{
		{"no job dir", "", "JobDir is required with JobUser"},
		{"inside the state dir", filepath.Join(base, "state", "jobs-here"), "is inside StateDir"},
		{"writable by others", worldWritable, "is writable by other users (mode 0777)"},
		{"owned by another user", notMine, "is owned by uid " + strconv.Itoa(int(nb.UID))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, filepath.Join(base, "state"))
			cfg.JobUser, cfg.JobDir = nb, tc.jobDir
			r, err := New(cfg)
			if err == nil {
				r.Shutdown()
				t.Fatalf("New succeeded; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v; want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestRuntime_JobUser_UnreachableJobDir: a JobDir the job user cannot
// reach fails each job's start, naming the directory in the way and the
// flag that fixes it; the runtime itself runs (and reports its jobs).
func TestRuntime_JobUser_UnreachableJobDir(t *testing.T) {
	needRoot(t)
	nb := nobody(t)
	base := openTempDir(t)
	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	r, c := newTestRuntime(t, filepath.Join(base, "state"), func(cfg *Config) {
		cfg.JobUser, cfg.JobDir = nb, filepath.Join(closed, "jobs")
	})
	job := testJob("job-unreachable", svc("s", "exec sleep 30"))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err == nil {
		t.Fatal("Start succeeded")
	}
	ev := c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	for _, want := range []string{"may not search " + closed + " (mode 0700", "--job-dir"} {
		if !strings.Contains(ev.Reason, want) {
			t.Errorf("reason %q lacks %q", ev.Reason, want)
		}
	}
}

// TestRuntime_JobUser_CannotReadWorkerSecrets is issue 21 §5 end to end
// through the runtime, laid out as cmd/ lays out a worker: a job of a
// worker running as root runs as the job user, in a working directory
// outside the state directory, and gets "Permission denied" when it
// tries to read the node credential, the self-signed TLS key, a --tls-key
// file of mode 0600 or the other jobs' records; it still finds its
// commands on PATH and owns its working directory and files.
func TestRuntime_JobUser_CannotReadWorkerSecrets(t *testing.T) {
	needRoot(t)
	nb := nobody(t)
	base := openTempDir(t)
	state := filepath.Join(base, "state")
	lock, err := worker.LockStateDir(state) // as the agent does
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Release() })
	secrets := map[string]string{
		filepath.Join(state, worker.IdentityFile):       `{"node_id":"n1","credential":"CREDENTIAL-SECRET"}`,
		filepath.Join(state, worker.SelfSignedCertFile): "-----BEGIN PRIVATE KEY-----\nSELFSIGNED-SECRET\n",
		filepath.Join(base, "tls.key"):                  "-----BEGIN PRIVATE KEY-----\nTLSKEY-SECRET\n",
	}
	for path, content := range secrets {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, c := newTestRuntime(t, filepath.Join(state, "process"), func(cfg *Config) {
		cfg.JobUser, cfg.JobDir = nb, filepath.Join(base, "jobs")
	})
	var cmd strings.Builder
	cmd.WriteString(`echo "uid=$(id -u) home=$HOME user=$USER"; echo "cwd=$(pwd)"
cat conf/app.conf; echo edited >> conf/app.conf && echo "files writable"
`)
	for path := range secrets {
		cmd.WriteString("cat " + path + `; echo "read ` + filepath.Base(path) + `: $?"` + "\n")
	}
	cmd.WriteString("ls " + filepath.Join(state, "process", "jobs") + `; echo "list records: $?"` + "\n")
	job := testJob("job-jobuser", svc("app", cmd.String()))
	job.WriteFiles = []*commonpb.WriteFile{{Path: "conf/app.conf", Contents: []byte("conf from the manager\n")}}
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "job end", isKind(key, worker.EventStopped))
	var out []string
	for _, ev := range c.All() {
		if ce := ev.Info.GetContainerEvent(); ev.Key == key && ce != nil {
			out = append(out, ce.GetText())
		}
	}
	text := strings.Join(out, "\n")
	t.Logf("the job's output:\n%s", text)
	wantLines := []string{
		"stdout: uid=" + strconv.Itoa(int(nb.UID)) + " home=" + nb.Home + " user=" + nb.Name,
		"stdout: cwd=" + filepath.Join(base, "jobs") + string(filepath.Separator),
		"stdout: conf from the manager",
		"stdout: files writable",
		"stdout: list records: 2",
	}
	for path := range secrets {
		wantLines = append(wantLines,
			"stderr: cat: "+path+": Permission denied",
			"stdout: read "+filepath.Base(path)+": 1")
	}
	for _, want := range wantLines {
		if !strings.Contains(text, want) {
			t.Errorf("the job's output lacks %q", want)
		}
	}
	for _, secret := range []string{"CREDENTIAL-SECRET", "SELFSIGNED-SECRET", "TLSKEY-SECRET"} {
		if strings.Contains(text, secret) {
			t.Errorf("the job read %s", secret)
		}
	}
	if fileExists(filepath.Join(base, "jobs", filepath.Base(newJobPaths(r.jobsDir, key).root))) {
		t.Error("the job's working directory was left behind")
	}
}

// TestRuntime_Restore_OlderRecordKeepsItsUser: a worker upgraded in
// place, now with a job user, re-adopts a job an older worker started
// (a record without work_dir and user): the process is not touched, and
// a service that dies is restarted as before, as the worker's user in
// the job's old working directory, until the job itself is restarted.
func TestRuntime_Restore_OlderRecordKeepsItsUser(t *testing.T) {
	needRoot(t)
	nb := nobody(t)
	base := openTempDir(t)
	dir := filepath.Join(base, "process")
	a, ca := newTestRuntime(t, dir, nil)
	s := svc("s", "id -u >> uid; echo $$ >> pid; exec sleep 30")
	s.Restart = commonpb.Service_ON_FAILURE
	job := testJob("job-old", s)
	key := worker.KeyOf(job)
	if _, err := a.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	ca.Wait(t, "started", isKind(key, worker.EventStarted))
	wd := workDir(a, key)
	pid := readPID(t, filepath.Join(wd, "pid"))
	a.Shutdown()
	// Make the record an older worker's: no work_dir, no user.
	recPath := newJobPaths(a.jobsDir, key).record
	data, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "work_dir")
	delete(rec, "user")
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recPath, data, 0o600); err != nil {
		t.Fatal(err)
	}

	b, cb := newTestRuntime(t, dir, func(cfg *Config) {
		cfg.JobUser, cfg.JobDir = nb, filepath.Join(base, "jobs")
	})
	if got := b.List(); len(got) != 1 || got[0].Key() != key || !alive(pid) {
		t.Fatalf("after restore: List = %v, process alive %v", got, alive(pid))
	}
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	cb.Wait(t, "restarted", isServiceStarted(key, "s"))
	waitUntil(t, "second run's uid", func() bool {
		data, _ := os.ReadFile(filepath.Join(wd, "uid"))
		return len(strings.Fields(string(data))) == 2
	})
	data, _ = os.ReadFile(filepath.Join(wd, "uid"))
	if got := strings.Fields(string(data)); got[1] != "0" {
		t.Errorf("restarted service ran as uid %s; want 0, as it was started", got[1])
	}
}
