package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker/process"
)

// TestWorkerJobIsolation: how --job-user and --job-dir resolve, for a
// worker running as root and as another user.
func TestWorkerJobIsolation(t *testing.T) {
	nb, err := process.LookupJobUser(process.FallbackJobUser)
	if err != nil {
		t.Skipf("no %s user: %v", process.FallbackJobUser, err)
	}
	def, err := process.DefaultJobUser()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	for _, tc := range []struct {
		name     string
		o        workerOptions
		euid     int
		wantUser string // "" no user change
		wantDir  string
		wantWarn string
		wantErr  string
	}{
		{name: "root, defaults", euid: 0, wantUser: def.Name, wantDir: state + "-jobs"},
		{name: "root, named user", o: workerOptions{jobUser: nb.Name}, euid: 0, wantUser: nb.Name, wantDir: state + "-jobs"},
		{name: "root, uid", o: workerOptions{jobUser: "65534", jobDir: "/srv/jobs"}, euid: 0, wantUser: nb.Name, wantDir: "/srv/jobs"},
		{name: "root, unknown user", o: workerOptions{jobUser: "norsk-no-such-user"}, euid: 0, wantErr: `--job-user: job user "norsk-no-such-user": no such user`},
		{name: "root, root", o: workerOptions{jobUser: "root"}, euid: 0, wantDir: state + "-jobs", wantWarn: "is the worker's own user"},
		{name: "not root, defaults", euid: 1000, wantDir: state + "-jobs", wantWarn: "does not run as root (uid 1000)"},
		{name: "not root, another user", o: workerOptions{jobUser: nb.Name}, euid: 1000, wantErr: "needs root, and this worker runs as uid 1000"},
		{name: "not root, itself", o: workerOptions{jobUser: nb.Name}, euid: int(nb.UID), wantDir: state + "-jobs", wantWarn: "is the worker's own user"},
		{name: "job dir in the state dir", o: workerOptions{jobDir: filepath.Join(state, "jobs")}, euid: 0, wantErr: "--job-dir " + filepath.Join(state, "jobs") + " is inside --state-dir"},
		{name: "job dir is the state dir", o: workerOptions{jobDir: state + "/"}, euid: 0, wantErr: "is inside --state-dir"},
		{name: "docker", o: workerOptions{runtime: "docker", jobUser: nb.Name}, euid: 0, wantErr: "need --runtime=process"},
		{name: "docker, defaults", o: workerOptions{runtime: "docker"}, euid: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if o.runtime == "" {
				o.runtime = "process"
			}
			iso, err := o.jobIsolation(state, tc.euid)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotUser := ""
			if iso.user != nil {
				gotUser = iso.user.Name
			}
			if gotUser != tc.wantUser || iso.dir != tc.wantDir {
				t.Errorf("user %q, dir %q; want %q, %q", gotUser, iso.dir, tc.wantUser, tc.wantDir)
			}
			if (tc.wantWarn == "") != (iso.warning == "") || !strings.Contains(iso.warning, tc.wantWarn) {
				t.Errorf("warning %q; want %q", iso.warning, tc.wantWarn)
			}
		})
	}
}

// TestWorkerJobIsolation_TLSKeyReadable: a --tls-key the job user could
// read is refused, naming the flag; one of mode 0600 is accepted.
func TestWorkerJobIsolation_TLSKeyReadable(t *testing.T) {
	nb, err := process.LookupJobUser(process.FallbackJobUser)
	if err != nil {
		t.Skipf("no %s user: %v", process.FallbackJobUser, err)
	}
	if os.Geteuid() == int(nb.UID) {
		t.Skip("runs as the job user")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	iso := jobIsolation{user: nb}
	for _, tc := range []struct {
		mode    os.FileMode
		wantErr string
	}{
		{0o644, "is readable by the job user"},
		{0o600, ""},
	} {
		key := filepath.Join(dir, "key.pem")
		if err := os.WriteFile(key, []byte("key"), tc.mode); err != nil || os.Chmod(key, tc.mode) != nil {
			t.Fatal(err)
		}
		err := iso.checkSecretsHidden(key)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--tls-key "+key+" "+tc.wantErr)) {
			t.Errorf("mode %#o: err = %v; want %q", tc.mode, err, tc.wantErr)
		}
	}
	if err := (jobIsolation{}).checkSecretsHidden(filepath.Join(dir, "key.pem")); err != nil {
		t.Errorf("without a job user: %v", err)
	}
}

func TestJobEnviron_DropsWorkerSettings(t *testing.T) {
	in := []string{"PATH=/usr/bin", "NORSK_TOKEN=secret", "HOME=/root", "NORSK_TOKEN_FILE=/etc/t", "NORSK_CLIENT_KEY=/k.pem", "NORSK_MANAGER_URL=m:6790", "LANG=C"}
	got := strings.Join(jobEnviron(in), " ")
	if want := "PATH=/usr/bin HOME=/root LANG=C"; got != want {
		t.Fatalf("jobEnviron = %q, want %q", got, want)
	}
}
