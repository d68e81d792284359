//go:build !unix

package process

import (
	"errors"
	"fmt"
	"io/fs"
)

// allowed cannot tell without Unix owners.
func (u *JobUser) allowed(path string, want uint32) (bool, error) {
	return false, errors.New("process: job users need a Unix system")
}

// describeOwner says "mode 0700" for fi.
func describeOwner(fi fs.FileInfo) string {
	if fi == nil {
		return "cannot stat it"
	}
	return fmt.Sprintf("mode %#o", fi.Mode().Perm())
}

// fileOwner reports no owner on platforms without file owners.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
