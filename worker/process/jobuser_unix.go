//go:build unix

package process

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// allowed reports whether u may access path for want, by its mode and
// owner alone (the owner's bits, else the group's, else the others').
func (u *JobUser) allowed(path string, want uint32) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("%s: no owner information", path)
	}
	perm := uint32(fi.Mode().Perm())
	var bits uint32
	switch {
	case st.Uid == u.UID:
		bits = perm >> 6
	case u.hasGroup(st.Gid):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&want == want, nil
}

// describeOwner says "mode 0700, owner uid 0, group gid 0" for fi.
func describeOwner(fi fs.FileInfo) string {
	if fi == nil {
		return "cannot stat it"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("mode %#o, owner uid %d, group gid %d", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	return fmt.Sprintf("mode %#o", fi.Mode().Perm())
}

// fileOwner returns the uid owning the file of fi.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
