package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// stateDirMode and secretFileMode are the modes SecureStateDir gives a
// state directory and the secrets in it: nothing in them is for any
// other user, least of all the jobs (docs/design/security.md, "What a job
// can reach").
const (
	stateDirMode   fs.FileMode = 0o700
	secretFileMode fs.FileMode = 0o600
)

// SecretFiles returns the names, inside a worker state directory, of the
// files that hold its secrets: the node identity (the credential) and the
// self-signed TLS key. SecureStateDir keeps them 0600.
func SecretFiles() []string { return []string{IdentityFile, SelfSignedCertFile} }

// SecureStateDir makes the existing state directory dir private to this
// process's user: mode 0700, and every secret file in it (SecretFiles)
// that exists mode 0600. A directory or secret file owned by another user
// is an error naming it and the owner (that user could read or loosen it
// whatever the mode says); nothing is changed then. LockStateDir calls it,
// so a state directory an older worker left looser is tightened at the
// next start. On platforms without file owners only the modes are set.
func SecureStateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("worker: state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("worker: state directory %s is not a directory", dir)
	}
	if err := checkOwner(dir, fi); err != nil {
		return err
	}
	type fix struct {
		path string
		mode fs.FileMode
	}
	fixes := []fix{{dir, stateDirMode}}
	for _, name := range SecretFiles() {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("worker: state directory: %w", err)
		}
		if err := checkOwner(path, fi); err != nil {
			return err
		}
		fixes = append(fixes, fix{path, secretFileMode})
	}
	for _, f := range fixes {
		fi, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("worker: state directory: %w", err)
		}
		if fi.Mode().Perm() == f.mode {
			continue
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			return fmt.Errorf("worker: make %s private (mode %#o): %w", f.path, f.mode, err)
		}
	}
	return nil
}

// checkOwner returns an error unless path (whose info is fi) belongs to
// this process's effective user.
func checkOwner(path string, fi fs.FileInfo) error {
	uid, ok := fileOwner(fi)
	if !ok || uid == os.Geteuid() {
		return nil
	}
	return fmt.Errorf("worker: %s is owned by uid %d, not by this worker's user (uid %d): that user could read the node's secrets; "+
		"chown it to the worker's user (or give the worker a --state-dir of its own)", path, uid, os.Geteuid())
}
