package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// makeBackup writes a backup of a store holding n jobs and returns its
// path.
func makeBackup(t *testing.T, n int) string {
	t.Helper()
	cfg := persistence.DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, log := persistence.TestStoreWithConfig(t, cfg)
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		rec, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: id}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := log.Append(context.Background(), persistence.JobKey(id), 0, persistence.Change{Record: rec, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.BeginBackup(persistence.BackupInfo{ManagerVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "backup.nmb")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runCmd runs norsk-manager with args and returns its output and error.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestRestore_SingleManager(t *testing.T) {
	from := makeBackup(t, 3)
	dir := filepath.Join(t.TempDir(), "restored")
	out, err := runCmd(t, "restore", "--from", from, "--data-dir", dir)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	for _, want := range []string{"restored backup " + from + " into " + dir, "keys ", "event log      restarts after index", "a single manager", "norsk-manager --data-dir " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	cfg := persistence.DefaultConfig(dir)
	cfg.Mode, cfg.GCInterval = persistence.ModeSingle, 0
	s, err := persistence.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Load(persistence.JobKey("job-2")); err != nil {
		t.Errorf("job-2 after the restore: %v", err)
	}
}

func TestRestore_FirstManagerOfANewCluster(t *testing.T) {
	from := makeBackup(t, 2)
	dir := filepath.Join(t.TempDir(), "restored")
	out, err := runCmd(t, "restore", "--from", from, "--data-dir", dir, "--bootstrap-expect", "1", "--name", "r1", "--raft-addr", "127.0.0.1:17948")
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if !strings.Contains(out, "the first manager of a new cluster: r1, Raft address 127.0.0.1:17948") {
		t.Errorf("output:\n%s", out)
	}
	cfg := persistence.DefaultConfig(dir)
	cfg.Mode, cfg.GCInterval = persistence.ModeCluster, 0
	s, err := persistence.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs, err := persistence.OpenRaftStore(persistence.DefaultRaftStoreConfig(filepath.Join(dir, "raft")))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	conf, err := replication.ReadConfiguration(filepath.Join(dir, "raft"), "r1", s, logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.Servers) != 1 || conf.Servers[0].ID != "r1" || conf.Servers[0].Address != "127.0.0.1:17948" {
		t.Errorf("configuration %+v, want r1 at 127.0.0.1:17948 alone", conf.Servers)
	}
}

// TestRestore_Refuses: bad flags are usage errors; a bad file or a
// non-empty dir is refused naming the file or dir and the reason; nothing
// is written.
func TestRestore_Refuses(t *testing.T) {
	good := makeBackup(t, 2)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(b)
	flipped[len(flipped)/2] ^= 1
	future := bytes.Clone(b)
	future[11] = 9 // envelope version 9
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		args  []string
		usage bool
		want  []string
	}{
		{"no --from", []string{"--data-dir", "NEW"}, true, []string{"--from is required"}},
		{"no --data-dir", []string{"--from", good}, true, []string{"--data-dir is required"}},
		{"bootstrap-expect 3", []string{"--from", good, "--data-dir", "NEW", "--bootstrap-expect", "3"}, true, []string{"--bootstrap-expect 3", "--join"}},
		{"bad name", []string{"--from", good, "--data-dir", "NEW", "--bootstrap-expect", "1", "--name", "bad name/x", "--raft-addr", "127.0.0.1:17948"}, true, []string{"a manager's name is"}},
		{"cluster flag alone", []string{"--from", good, "--data-dir", "NEW", "--name", "r1"}, true, []string{"--name is a cluster flag"}},
		{"raft-addr on every interface", []string{"--from", good, "--data-dir", "NEW", "--bootstrap-expect", "1", "--name", "r1"}, true, []string{"give --advertise"}},
		{"missing file", []string{"--from", filepath.Join(t.TempDir(), "nope"), "--data-dir", "NEW"}, false, []string{"no such file"}},
		{"a directory", []string{"--from", nonEmpty, "--data-dir", "NEW"}, true, []string{nonEmpty + " is a directory, not a snapshot file"}},
		{"truncated file", []string{"--from", write("t.nmb", b[:len(b)-40]), "--data-dir", "NEW"}, false, []string{"t.nmb", "truncated", "nothing was written"}},
		{"bad checksum", []string{"--from", write("c.nmb", flipped), "--data-dir", "NEW"}, false, []string{"c.nmb", "nothing was written"}},
		{"wrong format version", []string{"--from", write("v.nmb", future), "--data-dir", "NEW"}, false, []string{"v.nmb", "backup format version 9, this build reads 1"}},
		{"non-empty dir", []string{"--from", good, "--data-dir", nonEmpty}, false, []string{nonEmpty, "is not empty", "nothing was changed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			args := append([]string{"restore"}, tc.args...)
			for i, a := range args {
				if a == "NEW" {
					args[i] = filepath.Join(parent, "new")
				}
			}
			out, err := runCmd(t, args...)
			if err == nil {
				t.Fatalf("restore succeeded:\n%s", out)
			}
			var ue *usageError
			if errors.As(err, &ue) != tc.usage {
				t.Errorf("usage error = %v, want %v: %v", !tc.usage, tc.usage, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("something was written: %v", entries)
			}
		})
	}
	if entries, _ := os.ReadDir(nonEmpty); len(entries) != 1 {
		t.Errorf("the non-empty dir was changed: %v", entries)
	}
}

// TestRecover_AlreadyOne: recover of a cluster of one changes nothing (a
// second recover would only restart the event log once more).
func TestRecover_AlreadyOne(t *testing.T) {
	lone := filepath.Join(t.TempDir(), "lone")
	if _, err := runCmd(t, "restore", "--from", makeBackup(t, 1), "--data-dir", lone, "--bootstrap-expect", "1", "--name", "r1", "--raft-addr", "127.0.0.1:17948"); err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(t, "recover", "--data-dir", lone, "--name", "r1")
	if err != nil || !strings.Contains(out, "is already a cluster of one; nothing was changed") {
		t.Fatalf("recover = %v, output %q: want 'already a cluster of one'", err, out)
	}
}

// TestRecover_Refuses: recover refuses a single manager's data dir, a
// missing dir, a dir without Raft state, one in use and a --name that is
// not a server of the configuration, changing nothing.
func TestRecover_Refuses(t *testing.T) {
	single := filepath.Join(t.TempDir(), "single")
	if _, err := runCmd(t, "restore", "--from", makeBackup(t, 1), "--data-dir", single); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(single, "raft"), 0o700); err != nil { // as if it had Raft state
		t.Fatal(err)
	}
	cluster := filepath.Join(t.TempDir(), "cluster")
	if _, err := runCmd(t, "restore", "--from", makeBackup(t, 1), "--data-dir", cluster, "--bootstrap-expect", "1", "--name", "r1", "--raft-addr", "127.0.0.1:17948"); err != nil {
		t.Fatal(err)
	}
	// A cluster whose only server, r1, answers at its Raft address: a
	// --name outside the configuration is refused as such, not as "r1
	// answers".
	r1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	other := filepath.Join(t.TempDir(), "other")
	if _, err := runCmd(t, "restore", "--from", makeBackup(t, 1), "--data-dir", other, "--bootstrap-expect", "1", "--name", "r1", "--raft-addr", r1.Addr().String()); err != nil {
		t.Fatal(err)
	}
	cfg := persistence.DefaultConfig(cluster)
	cfg.GCInterval = 0
	inUse, err := persistence.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no data dir flag", []string{"--name", "r1"}, "--data-dir is required"},
		{"no raft state", []string{"--data-dir", t.TempDir(), "--name", "r1"}, "has no Raft state"},
		{"missing data dir", []string{"--data-dir", filepath.Join(t.TempDir(), "nope"), "--name", "r1"}, "nope does not exist"},
		{"not a server", []string{"--data-dir", other, "--name", "m9"}, "m9 is not a server in the Raft configuration (servers: r1 at " + r1.Addr().String() + ")"},
		{"single manager", []string{"--data-dir", single, "--name", "r1"}, "holds a single manager's state"},
		{"in use", []string{"--data-dir", cluster, "--name", "r1"}, "is a manager still running on this data dir?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCmd(t, append([]string{"recover"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("recover = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// makeACLBackup writes a backup of a store holding a job and an ACL
// record of two tokens, bootstrapped once, and returns its path.
func makeACLBackup(t *testing.T) string {
	t.Helper()
	cfg := persistence.DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, log := persistence.TestStoreWithConfig(t, cfg)
	rec := &internalpb.AclRecord{BootstrapIndex: 1}
	for i := range 2 {
		rec.Tokens = append(rec.Tokens, &internalpb.AclTokenRecord{
			Token:      &managerpb.AclToken{AccessorId: fmt.Sprintf("acc-%d", i), Name: fmt.Sprintf("t%d", i), Role: "management"},
			SecretHash: bytes.Repeat([]byte{byte(i + 1)}, persistence.SecretHashLen),
		})
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(context.Background(), persistence.ACLKey, 0, persistence.Change{Record: b, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	bk, err := s.BeginBackup(persistence.BackupInfo{ManagerVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	var buf bytes.Buffer
	if _, err := bk.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "backup.nmb")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRestore_ACLTokens (issue 21 §8): restore says how many ACL tokens it
// brings back, and --acl-reset drops them (a single manager's dir and a
// new cluster's first manager), saying that a new bootstrap is needed.
func TestRestore_ACLTokens(t *testing.T) {
	from := makeACLBackup(t)
	cases := []struct {
		name  string
		args  []string
		mode  persistence.Mode
		want  string
		reset bool
	}{
		{"kept", nil, persistence.ModeSingle, "ACL tokens     2 valid again, bootstrap index 1: every token in the backup authenticates, also one revoked after it was taken", false},
		{"reset", []string{"--acl-reset"}, persistence.ModeSingle, "ACL tokens     2 dropped (--acl-reset), with the bootstrap (index 1): start the manager with --acl and run norsk-ctl acl bootstrap", true},
		{"reset, first manager of a new cluster", []string{"--acl-reset", "--bootstrap-expect", "1", "--name", "r1", "--raft-addr", "127.0.0.1:17948"},
			persistence.ModeCluster, "2 dropped (--acl-reset)", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "restored")
			out, err := runCmd(t, append([]string{"restore", "--from", from, "--data-dir", dir}, tc.args...)...)
			if err != nil {
				t.Fatalf("restore: %v\n%s", err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			// The suggested start command keeps the API closed: without
			// --acl the restored manager would serve every call
			// unauthenticated.
			if start := "norsk-manager --data-dir " + dir; !strings.Contains(out, start+" --acl") && !strings.Contains(out, start+" --name r1 --bootstrap-expect 1 --acl") {
				t.Errorf("the suggested start command lacks --acl:\n%s", out)
			}
			cfg := persistence.DefaultConfig(dir)
			cfg.Mode, cfg.GCInterval = tc.mode, 0
			s, err := persistence.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.View(func(r *persistence.Reader) error {
				_, _, err := r.ACL()
				return err
			})
			if tc.reset != errors.Is(err, persistence.ErrNotFound) {
				t.Errorf("reading the ACL record after the restore: %v (reset %v)", err, tc.reset)
			}
		})
	}
}
