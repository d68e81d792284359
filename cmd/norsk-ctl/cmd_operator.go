package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
)

// newOperatorCommand builds "norsk-ctl operator": cluster-wide operations
// of an operator (backups).
func newOperatorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Operator tasks: backups of the manager's state",
	}
	snap := &cobra.Command{
		Use:   "snapshot",
		Short: "Save and inspect backups (snapshots) of the manager's state",
		Long: `A snapshot is a backup file of everything the manager stores (jobs, nodes,
cluster slots with their credentials, bundles, the event log), taken online
at one applied index. "norsk-manager restore" makes a new data dir from it
(docs/design/backup.md). Keep snapshot files as private as the data dir:
they hold the workers' node credentials.`,
	}
	snap.AddCommand(newSnapshotSaveCommand(), newSnapshotInspectCommand())
	cmd.AddCommand(snap)
	return cmd
}

func newSnapshotSaveCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save an online, consistent snapshot of the manager's state to FILE",
		Long: `Save asks one manager for a snapshot of its store and writes it to FILE.

The snapshot is consistent: it holds exactly the writes applied up to one
index (printed as "applied index"). In a cluster any member can serve it,
after catching up with the leader, so it holds every write acknowledged
before the command started; give one --manager-url to choose the member
(a follower spares the leader the work). Writes go on while it is taken.

The file is written next to FILE under a temporary name, synced, checked
(size and SHA-256 against the manager's, and the file's own checksum) and
only then renamed to FILE: FILE never holds a partial snapshot. An existing
FILE is refused unless --force; a directory always is. FILE "-" streams the
snapshot to standard output (checked against the manager's size and SHA-256
as it goes; after a failure what was written is a prefix to discard, and the
exit code says so) and prints the summary on standard error. Progress (bytes and keys) is shown while
standard error is a terminal. The --timeout applies to each message, not to
the whole transfer.`,
		Args: ctlArgs("FILE"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			return snapshotSave(ctx, e, m, args[0], force)
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE if it exists")
	return withExitCodes(cmd)
}

func newSnapshotInspectCommand() *cobra.Command {
	return withExitCodes(&cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a snapshot file's checksum and print what it holds",
		Long: `Inspect reads the whole snapshot file, checks its format version and its
SHA-256, and prints its metadata (applied index, keys, store id, when and by
which manager it was taken), its size and the SHA-256 of the file. It exits 1
if the file is truncated, altered or not a snapshot. ("norsk-manager restore"
checks the records inside as well.)`,
		Args: ctlArgs("FILE"),
		RunE: ctlRun(func(_ context.Context, e *ctlEnv, args []string) error {
			info, err := inspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			return e.printSnapshotInfo("snapshot "+args[0]+": checksum OK", info)
		}),
	})
}

// snapshotFileInfo is what save and inspect print.
type snapshotFileInfo struct {
	File string          `json:"file"`
	Meta backupfile.Meta `json:"meta"`
	Size int64           `json:"size_bytes"`
	// SHA256 is the whole file's (what sha256sum prints).
	SHA256 string `json:"sha256"`
	// Manager is the address of the manager that served it (save only).
	Manager string `json:"manager,omitempty"`
}

// inspectSnapshotFile verifies the file at path and returns its metadata,
// size and whole-file SHA-256.
func inspectSnapshotFile(path string) (snapshotFileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotFileInfo{}, err
	}
	defer f.Close()
	whole := sha256.New()
	m, size, err := backupfile.Verify(io.TeeReader(f, whole))
	if err != nil {
		return snapshotFileInfo{}, fmt.Errorf("snapshot file %s: %w", path, err)
	}
	return snapshotFileInfo{File: path, Meta: m, Size: size, SHA256: hex.EncodeToString(whole.Sum(nil))}, nil
}

func snapshotSave(ctx context.Context, e *ctlEnv, m *client.NorskManager, path string, force bool) (err error) {
	if path == "-" {
		return snapshotSaveStdout(ctx, e, m)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return ctlUsagef("%s is a directory: give the path of the snapshot file to write, like %s", path, filepath.Join(path, "norsk-manager.snapshot"))
	} else if err == nil && !force {
		return ctlUsagef("%s exists; give --force to replace it", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.partial")
	if err != nil {
		return fmt.Errorf("create a temporary file next to %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	prog := newProgress(e.errOut, e.now)
	info, err := m.SnapshotSave(ctx, tmp, prog.update)
	prog.done()
	if err != nil {
		return ctlAbout(err, "snapshot save")
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	// Check what is on disk, not what was sent: the file as written must
	// be the manager's, byte for byte, and sound on its own.
	got, err := inspectSnapshotFile(tmp.Name())
	if err != nil {
		return err
	}
	if got.Size != info.Size || got.SHA256 != hex.EncodeToString(info.SHA256) {
		return fmt.Errorf("the file written (%d bytes, sha256 %s) is not what the manager sent (%d bytes, sha256 %x)", got.Size, got.SHA256, info.Size, info.SHA256)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", dir, err)
		}
	}
	got.File, got.Manager = path, info.Addr
	return e.printSnapshotInfo("saved snapshot to "+path, got)
}

// snapshotSaveStdout streams the snapshot to standard output (FILE "-",
// as etcdctl users expect: "norsk-ctl operator snapshot save - | ssh … "),
// the summary and progress to standard error. The client checks the
// stream's size and SHA-256 against the manager's as it goes; on any error
// the output holds a prefix that must be discarded, and the exit code is
// not 0.
func snapshotSaveStdout(ctx context.Context, e *ctlEnv, m *client.NorskManager) error {
	// The stream is verified as a file would be (its own format and
	// checksum, backupfile.Verify) while it is written out.
	pr, pw := io.Pipe()
	type verified struct {
		meta backupfile.Meta
		err  error
	}
	verifiedCh := make(chan verified, 1)
	go func() {
		meta, _, err := backupfile.Verify(pr)
		_, _ = io.Copy(io.Discard, pr) // never block the writer
		verifiedCh <- verified{meta, err}
	}()
	prog := newProgress(e.errOut, e.now)
	info, err := m.SnapshotSave(ctx, io.MultiWriter(e.out, pw), prog.update)
	prog.done()
	pw.CloseWithError(err) // nil: EOF
	v := <-verifiedCh
	if err != nil {
		return ctlAbout(err, "snapshot save")
	}
	if v.err != nil {
		return fmt.Errorf("the snapshot written to standard output: %w", v.err)
	}
	got := snapshotFileInfo{File: "-", Meta: v.meta, Size: info.Size, SHA256: hex.EncodeToString(info.SHA256), Manager: info.Addr}
	summary := *e
	summary.out = e.errOut
	return summary.printSnapshotInfo("wrote snapshot to standard output", got)
}

// printSnapshotInfo prints info under title, or as JSON.
func (e *ctlEnv) printSnapshotInfo(title string, info snapshotFileInfo) error {
	if e.jsonOut {
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.out, "%s\n", b)
		return err
	}
	m := info.Meta
	rows := [][]string{
		{"applied index", fmt.Sprint(m.AppliedIndex)},
		{"event head", fmt.Sprint(m.EventHead)},
		{"keys", fmt.Sprint(m.Keys)},
		{"size", fmt.Sprintf("%d bytes (%s)", info.Size, humanBytes(info.Size))},
		{"sha256", info.SHA256},
		{"taken", m.CreatedAt.Format(time.RFC3339)},
		{"store id", dash(m.StoreID)},
		{"mode", dash(m.Mode)},
		{"manager version", dash(m.ManagerVersion)},
	}
	if info.Manager != "" {
		rows = append(rows, []string{"from manager", info.Manager})
	}
	fmt.Fprintln(e.out, title)
	for _, r := range rows {
		fmt.Fprintf(e.out, "  %-16s %s\n", r[0], r[1])
	}
	return nil
}

// humanBytes renders n in KiB/MiB/GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// progress shows a SnapshotSave's progress on w when w is a terminal, at
// most every 100 ms; elsewhere it shows nothing.
type progress struct {
	w    io.Writer
	now  func() time.Time
	last time.Time
	tty  bool
	seen bool
}

func newProgress(w io.Writer, now func() time.Time) *progress {
	p := &progress{w: w, now: now}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(s client.SnapshotProgress) {
	if !p.tty {
		return
	}
	if t := p.now(); t.Sub(p.last) >= 100*time.Millisecond || s.Keys == s.TotalKeys {
		p.last, p.seen = t, true
		pct := ""
		if s.EstimatedBytes > 0 {
			pct = fmt.Sprintf(" (%d%%)", min(100, s.Bytes*100/s.EstimatedBytes))
		}
		fmt.Fprintf(p.w, "\r%s of ~%s%s, %d of %d keys   ", humanBytes(s.Bytes), humanBytes(s.EstimatedBytes), pct, s.Keys, s.TotalKeys)
	}
}

// done ends the progress line.
func (p *progress) done() {
	if p.seen {
		fmt.Fprintln(p.w)
	}
}
