package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// testSnapshotFile returns a valid backup file (envelope around filler
// bytes: norsk-ctl does not look inside the snapshot) and its metadata.
func testSnapshotFile(t *testing.T) ([]byte, backupfile.Meta) {
	t.Helper()
	m := backupfile.Meta{StoreID: "store-1", StoreFormat: 1, Mode: "cluster", AppliedIndex: 1234, EventHead: 99, Keys: 40,
		CreatedAt: ctlTestNow.Add(-time.Minute), ManagerVersion: "v-test"}
	var buf bytes.Buffer
	w, err := backupfile.NewWriter(&buf, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("records!"), 700)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), m
}

func snapshotHeader(m backupfile.Meta, size int) *managerpb.SnapshotHeader {
	return &managerpb.SnapshotHeader{FileFormatVersion: 1, StoreFormatVersion: m.StoreFormat, AppliedIndex: m.AppliedIndex, StoreId: m.StoreID,
		CreatedAt: timestamppb.New(m.CreatedAt), EstimatedSizeBytes: uint64(size), Keys: m.Keys, EventHeadIndex: m.EventHead, ManagerVersion: m.ManagerVersion}
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestSnapshotSave_WritesTheFile(t *testing.T) {
	fake, addr := newTestFake(t)
	file, m := testSnapshotFile(t)
	fake.SetSnapshot(snapshotHeader(m, len(file)), file, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.nmb")
	out := mustRun(t, addr, "operator", "snapshot", "save", path)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, file) {
		t.Fatalf("FILE holds %d bytes, want the manager's %d", len(got), len(file))
	}
	sum := sha256.Sum256(file)
	for _, want := range []string{"saved snapshot to " + path, "applied index    1234", "keys             40", "sha256           " + hex.EncodeToString(sum[:]),
		"store id         store-1", "from manager     " + addr} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("left in the directory: %v", names)
	}

	// --output json, and --force replaces.
	out = mustRun(t, addr, "--output", "json", "operator", "snapshot", "save", "--force", path)
	var info snapshotFileInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("json output: %v\n%s", err, out)
	}
	if info.Meta != m || info.Size != int64(len(file)) || info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("json info %+v", info)
	}

	out = mustRun(t, addr, "operator", "snapshot", "inspect", path)
	if !strings.Contains(out, "checksum OK") || !strings.Contains(out, "applied index    1234") {
		t.Errorf("inspect output:\n%s", out)
	}
}

// TestSnapshotSave_NeverLeavesABadFile: a stream that fails its checks, a
// manager that refuses, and an existing FILE without --force end with a
// non-zero exit, and FILE is absent (or untouched) with no temporary file
// left.
func TestSnapshotSave_NeverLeavesABadFile(t *testing.T) {
	file, m := testSnapshotFile(t)
	hdr := snapshotHeader(m, len(file))
	sum := sha256.Sum256(file)
	notBackup := bytes.Repeat([]byte("x"), 3000)
	cases := []struct {
		name     string
		setup    func(f *clienttest.Manager)
		existing bool
		code     int
		want     string
	}{
		{"wrong checksum", func(f *clienttest.Manager) {
			bad := bytes.Clone(sum[:])
			bad[0] ^= 1
			f.SetSnapshot(hdr, file, &managerpb.SnapshotTrailer{Sha256: bad, SizeBytes: uint64(len(file))})
		}, false, ctlExitFailure, "is not the manager's"},
		{"wrong size", func(f *clienttest.Manager) {
			f.SetSnapshot(hdr, file, &managerpb.SnapshotTrailer{Sha256: sum[:], SizeBytes: uint64(len(file) + 1)})
		}, false, ctlExitFailure, "the manager sent"},
		{"not a backup file", func(f *clienttest.Manager) {
			f.SetSnapshot(hdr, notBackup, nil)
		}, false, ctlExitFailure, "not a norsk-manager backup file"},
		{"no quorum", func(f *clienttest.Manager) {
			f.Fail("SnapshotSave", status.Error(codes.Unavailable, "no leader"))
		}, false, ctlExitUnavailable, "manager unavailable"},
		{"existing file", func(f *clienttest.Manager) {
			f.SetSnapshot(hdr, file, nil)
		}, true, ctlExitUsage, "exists; give --force"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, addr := newTestFake(t)
			tc.setup(fake)
			dir := t.TempDir()
			path := filepath.Join(dir, "backup.nmb")
			if tc.existing {
				if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := runCtl(t, testCtx(), "", "--manager-url", addr, "operator", "snapshot", "save", path)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, tc.code, tc.want)
			}
			names := dirNames(t, dir)
			if tc.existing {
				if b, _ := os.ReadFile(path); string(b) != "old" || len(names) != 1 {
					t.Errorf("existing FILE changed or extra files: %v", names)
				}
				return
			}
			if len(names) != 0 {
				t.Errorf("left in the directory: %v", names)
			}
		})
	}
}

// TestSnapshotSave_RefusesADirectory: FILE naming an existing directory is
// a usage error, with or without --force, and nothing is written into it.
func TestSnapshotSave_RefusesADirectory(t *testing.T) {
	fake, addr := newTestFake(t)
	file, m := testSnapshotFile(t)
	fake.SetSnapshot(snapshotHeader(m, len(file)), file, nil)
	dir := t.TempDir()
	for _, args := range [][]string{{dir}, {"--force", dir}} {
		r := runCtl(t, testCtx(), "", append([]string{"--manager-url", addr, "operator", "snapshot", "save"}, args...)...)
		if want := dir + " is a directory: give the path of the snapshot file"; r.code != ctlExitUsage || !strings.Contains(r.stderr, want) {
			t.Fatalf("save %v: exit %d, stderr %q; want exit %d mentioning %q", args, r.code, r.stderr, ctlExitUsage, want)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Fatalf("save %v wrote into the directory: %v", args, names)
		}
	}
}

// TestSnapshotSave_Stdout: FILE "-" streams exactly the manager's file to
// standard output, the summary to standard error, and writes no file named
// "-"; a stream that fails its checks exits non-zero.
func TestSnapshotSave_Stdout(t *testing.T) {
	fake, addr := newTestFake(t)
	file, m := testSnapshotFile(t)
	fake.SetSnapshot(snapshotHeader(m, len(file)), file, nil)
	t.Chdir(t.TempDir())
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "operator", "snapshot", "save", "-")
	if r.code != 0 {
		t.Fatalf("save -: exit %d, stderr %q", r.code, r.stderr)
	}
	if r.stdout != string(file) {
		t.Fatalf("standard output holds %d bytes, want the manager's %d", len(r.stdout), len(file))
	}
	for _, want := range []string{"wrote snapshot to standard output", "applied index    1234", "store id         store-1"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("standard error lacks %q:\n%s", want, r.stderr)
		}
	}
	if names := dirNames(t, "."); len(names) != 0 {
		t.Errorf("save - wrote files: %v", names)
	}

	fake.SetSnapshot(snapshotHeader(m, 3000), bytes.Repeat([]byte("x"), 3000), nil)
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "operator", "snapshot", "save", "-")
	if r.code == 0 || !strings.Contains(r.stderr, "not a norsk-manager backup file") {
		t.Fatalf("save - of a stream that is not a backup: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSnapshotInspect_RefusesBadFiles(t *testing.T) {
	file, _ := testSnapshotFile(t)
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"truncated.nmb": file[:len(file)-10],
		"altered.nmb":   append(bytes.Clone(file[:100]), append([]byte{file[100] ^ 1}, file[101:]...)...),
		"other.nmb":     []byte("just some text, not a backup"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := runCtl(t, testCtx(), "", "operator", "snapshot", "inspect", p)
		if r.code != ctlExitFailure || !strings.Contains(r.stderr, p) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 naming the file", name, r.code, r.stderr)
		}
	}
}
