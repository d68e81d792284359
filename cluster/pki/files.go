package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Modes of the files WriteNew writes: private keys are readable by their
// owner only.
const (
	CertFileMode fs.FileMode = 0o644
	KeyFileMode  fs.FileMode = 0o600
)

// File is one file for WriteNew.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode
}

// WriteNew writes every file, or none: if any of them exists it writes
// nothing and returns a *FilesExistError naming all that exist (matching
// ErrFileExists). Each file is created exclusively (O_EXCL, so a file
// appearing meanwhile is not overwritten either), with its Mode, and
// synced, then its directory is synced. On a failure midway the files
// already created are removed. The directories must exist.
func WriteNew(files []File) error {
	var existing []string
	for _, f := range files {
		if _, err := os.Lstat(f.Path); err == nil {
			existing = append(existing, f.Path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pki: %w", err)
		}
	}
	if len(existing) > 0 {
		return &FilesExistError{Paths: existing}
	}
	var created []string
	for _, f := range files {
		if err := writeExclusive(f); err != nil {
			for _, p := range created {
				_ = os.Remove(p)
			}
			if errors.Is(err, fs.ErrExist) {
				return &FilesExistError{Paths: []string{f.Path}}
			}
			return fmt.Errorf("pki: write %s: %w", f.Path, err)
		}
		created = append(created, f.Path)
	}
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[filepath.Dir(f.Path)] = true
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("pki: sync directory %s: %w", d, err)
		}
	}
	return nil
}

func writeExclusive(f File) (err error) {
	fh, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Path)
		}
	}()
	// The umask may have narrowed the mode; a key must not be wider than
	// asked, a certificate should be as readable as asked.
	if err := fh.Chmod(f.Mode); err != nil {
		return err
	}
	if _, err := fh.Write(f.Data); err != nil {
		return err
	}
	return fh.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Files returns the files of the CA for WriteNew: the certificate at
// certPath (CertFileMode) and the key at keyPath (KeyFileMode).
func (ca *CA) Files(certPath, keyPath string) []File {
	return []File{{Path: certPath, Data: ca.CertPEM, Mode: CertFileMode}, {Path: keyPath, Data: ca.KeyPEM, Mode: KeyFileMode}}
}

// Files returns the files of the certificate for WriteNew: the certificate
// at certPath (CertFileMode) and the key at keyPath (KeyFileMode).
func (is *Issued) Files(certPath, keyPath string) []File {
	return []File{{Path: certPath, Data: is.CertPEM, Mode: CertFileMode}, {Path: keyPath, Data: is.KeyPEM, Mode: KeyFileMode}}
}
