package process

// wrapperScript runs a service's command and records its exit status in
// the exit file, so that a worker that did not start the process (it
// adopted it after a restart) still learns how it ended. $0 is the shell,
// $1 the exit file's path (for ps, and the wrapper of an older worker,
// which wrote to it by name), $2 the command. The status is written to
// descriptor 3, the exit file the worker opened: the wrapper may run as a
// job user who cannot open anything in the state directory, and the
// command runs without it (3>&-).
//
// The wrapper is the process group leader. It traps HUP, INT and TERM with
// a handler (not ignore: an ignored signal would be inherited by the
// command), so a SIGTERM to the group reaches the command and the wrapper
// waits for it; POSIX shells run a trap only after the foreground command
// completes. A command killed by signal N yields $? = 128+N. SIGKILL to
// the group also kills the wrapper: then no exit file is written and the
// status comes from wait(2) if this process is the parent, else it is
// unknown.
const wrapperScript = `trap 'norsk_signalled=1' HUP INT TERM
"$0" -c "$2" 3>&-
norsk_code=$?
echo "$norsk_code" >&3
exit "$norsk_code"`

// proc is one incarnation of a service's process group (the wrapper
// shell is its leader, pid == pgid).
type proc struct {
	pid        int
	startTicks uint64 // /proc/<pid>/stat starttime: defeats pid reuse
	pidfd      int    // -1 when pidfd is unavailable
	child      bool   // started by this Runtime: reap it with wait4
	exitFile   string

	done   chan struct{} // closed once the process has exited; only ever closed
	status exitStatus    // set before done is closed
}
