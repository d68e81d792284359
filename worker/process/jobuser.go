package process

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// Job users a worker running as root picks when it is not told
// (DefaultJobUser): the dedicated account if the host has one, else the
// system's unprivileged nobody.
const (
	// DedicatedJobUser is the account made for the jobs of a worker
	// (useradd --system --no-create-home --shell /usr/sbin/nologin
	// norsk-job): unlike nobody, no other daemon shares it, so jobs can
	// reach nothing but their own files.
	DedicatedJobUser = "norsk-job"
	// FallbackJobUser is used when DedicatedJobUser does not exist.
	FallbackJobUser = "nobody"
)

// ErrNoJobUser is matched by LookupJobUser's and DefaultJobUser's error
// when the account does not exist on this host.
var ErrNoJobUser = errors.New("no such user")

// JobUser is the account the services of a Runtime run as
// (Config.JobUser): their uid, primary gid and supplementary groups, and
// the HOME, USER and LOGNAME of their environment. Recorded with each
// job, so that a worker restarted with another --job-user restarts an
// earlier job's services as the user they ran as.
type JobUser struct {
	// Name is the user name (for USER, LOGNAME, logs and errors).
	Name string `json:"name"`
	// UID and GID are the user id and primary group id.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are the supplementary group ids (the user's groups in the
	// group database, the primary one included).
	Groups []uint32 `json:"groups,omitempty"`
	// Home is the user's home directory, the services' HOME.
	Home string `json:"home,omitempty"`
}

// String returns "name (uid N)".
func (u *JobUser) String() string { return fmt.Sprintf("%s (uid %d)", u.Name, u.UID) }

// LookupJobUser resolves name, a user name or a numeric uid, in the
// user database (/etc/passwd and /etc/group, or NSS with cgo). A user
// that does not exist is an error matching ErrNoJobUser that names it.
func LookupJobUser(name string) (*JobUser, error) {
	if name == "" {
		return nil, fmt.Errorf("job user: the name is empty")
	}
	u, err := user.Lookup(name)
	if _, unknown := errors.AsType[user.UnknownUserError](err); unknown {
		if _, numErr := strconv.ParseUint(name, 10, 32); numErr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		if isUnknownUser(err) {
			return nil, fmt.Errorf("job user %q: %w on this host (create it, e.g. useradd --system --no-create-home --shell /usr/sbin/nologin %s, or name another)", name, ErrNoJobUser, name)
		}
		return nil, fmt.Errorf("job user %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("job user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("job user %q: gid %q is not a number", name, u.Gid)
	}
	ju := &JobUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				ju.Groups = append(ju.Groups, uint32(n))
			}
		}
	}
	if len(ju.Groups) == 0 {
		ju.Groups = []uint32{ju.GID}
	}
	return ju, nil
}

func isUnknownUser(err error) bool {
	_, byName := errors.AsType[user.UnknownUserError](err)
	_, byID := errors.AsType[user.UnknownUserIdError](err)
	return byName || byID
}

// DefaultJobUser returns the user jobs run as when the worker runs as
// root and is not told: DedicatedJobUser if it exists, else
// FallbackJobUser. Neither existing is an error matching ErrNoJobUser.
func DefaultJobUser() (*JobUser, error) {
	u, err := LookupJobUser(DedicatedJobUser)
	if errors.Is(err, ErrNoJobUser) {
		u, err = LookupJobUser(FallbackJobUser)
	}
	if errors.Is(err, ErrNoJobUser) {
		return nil, fmt.Errorf("job user: neither %q nor %q exists on this host: %w (create %s, or name a user)", DedicatedJobUser, FallbackJobUser, ErrNoJobUser, DedicatedJobUser)
	}
	return u, err
}

// env returns the variables that tell a service who it runs as.
func (u *JobUser) env() []string {
	env := []string{"USER=" + u.Name, "LOGNAME=" + u.Name}
	if u.Home != "" {
		env = append(env, "HOME="+u.Home)
	}
	return env
}

// hasGroup reports whether gid is u's primary or a supplementary group.
func (u *JobUser) hasGroup(gid uint32) bool {
	if gid == u.GID {
		return true
	}
	for _, g := range u.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Access bits of CanAccess (the "other" triple of a mode).
const (
	AccessRead   = 0o4
	AccessWrite  = 0o2
	AccessSearch = 0o1
)

// CanAccess reports whether u may open path for want (AccessRead,
// AccessWrite, AccessSearch, or'ed), judging by the modes and owners of
// path and of every directory above it (which u must be able to search),
// after resolving symbolic links: the owner's bits if u owns it, else the
// group's if u is in its group, else the others' (POSIX ACLs are not
// read). Root may access anything. A path that does not exist is an
// error; so is one whose owner cannot be read (not a Unix system).
func (u *JobUser) CanAccess(path string, want uint32) (bool, error) {
	if u.UID == 0 {
		return true, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return false, err
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		ok, err := u.allowed(dir, AccessSearch)
		if err != nil || !ok {
			return false, err
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return u.allowed(real, want)
}

// Reach returns nil if u may search path and every directory above it,
// else an error naming the first directory it may not search, its mode and
// owner: a service's working directory must be reachable, and its chdir
// happens as u.
func (u *JobUser) Reach(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	var chain []string
	for dir := real; ; dir = filepath.Dir(dir) {
		chain = append([]string{dir}, chain...)
		if dir == filepath.Dir(dir) {
			break
		}
	}
	for _, dir := range chain {
		ok, err := u.allowed(dir, AccessSearch)
		if err != nil {
			return err
		}
		if !ok {
			fi, _ := os.Stat(dir)
			return fmt.Errorf("the job user %s may not search %s (%s)", u, dir, describeOwner(fi))
		}
	}
	return nil
}
