package process

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

const (
	// maxLineBytes cuts longer output lines (the rest follows as the next
	// line).
	maxLineBytes = 8 << 10
	// readBudget bounds the bytes read from one log file per poll, so that
	// a burst cannot stall the job's loop.
	readBudget = 256 << 10
	// skipAfter: a reader this far behind the end of a log file skips to
	// the end (the rate limit would drop nearly all of it anyway) and says
	// how much it skipped.
	skipAfter = 8 << 20
)

// tailer follows the stdout and stderr log files of one service and turns
// their lines into container events, at most limit lines per second. It
// has no goroutine: its job's loop calls poll periodically and flush when
// the service exits. Not safe for concurrent use.
type tailer struct {
	files    [2]*tailFile
	limit    lineLimiter
	maxBytes int64
	emit     func(text string) // must not block
	lastErr  string            // last stderr line read (even if suppressed)
}

type tailFile struct {
	path    string
	prefix  string // "stdout: " or "stderr: "
	f       *os.File
	off     int64
	partial []byte
}

func newTailer(stdoutPath, stderrPath string, linesPerSecond int, maxBytes int64, emit func(string)) *tailer {
	return &tailer{
		files: [2]*tailFile{
			{path: stdoutPath, prefix: "stdout: "},
			{path: stderrPath, prefix: "stderr: "},
		},
		limit:    lineLimiter{perSecond: linesPerSecond},
		maxBytes: maxBytes,
		emit:     emit,
	}
}

// skipToEnd makes the tailer ignore what the files hold now (output
// written while no worker was watching is not replayed).
func (t *tailer) skipToEnd() {
	for _, tf := range t.files {
		if fi, err := os.Stat(tf.path); err == nil {
			tf.off = fi.Size()
		}
	}
}

// poll reads what was appended since the last call and emits its complete
// lines. It returns true if a file was over its size cap or too far behind:
// the service writes fast, and the caller should poll again soon so that the
// files stay near MaxLogBytes.
func (t *tailer) poll(now time.Time) bool {
	if n := t.limit.roll(now); n > 0 {
		t.emit(fmt.Sprintf("%d lines suppressed (output limit %d lines/s)", n, t.limit.perSecond))
	}
	busy := false
	for _, tf := range t.files {
		if t.read(tf) {
			busy = true
		}
	}
	return busy
}

// flush polls, then emits any incomplete last line: the process has exited.
func (t *tailer) flush(now time.Time) {
	_ = t.poll(now)
	for _, tf := range t.files {
		if len(tf.partial) > 0 {
			t.line(tf, tf.partial)
			tf.partial = nil
		}
	}
}

// lastError returns the last non-empty stderr line read (at most 200
// bytes), or "" if none.
func (t *tailer) lastError() string {
	if len(t.lastErr) > 200 {
		return t.lastErr[:200] + "…"
	}
	return t.lastErr
}

// close releases the files.
func (t *tailer) close() {
	for _, tf := range t.files {
		if tf.f != nil {
			_ = tf.f.Close()
			tf.f = nil
		}
	}
}

// read emits what tf gained since the last read and keeps the file under
// its cap; it returns true if the file was at the cap or far behind.
func (t *tailer) read(tf *tailFile) bool {
	if tf.f == nil {
		f, err := os.Open(tf.path)
		if err != nil {
			return false // not created yet
		}
		tf.f = f
	}
	fi, err := tf.f.Stat()
	if err != nil {
		return false
	}
	size := fi.Size()
	if size < tf.off { // truncated by someone else
		tf.off, tf.partial = 0, nil
	}
	if size == tf.off {
		return false // nothing new: the common case costs one fstat
	}
	if size >= t.maxBytes {
		// At the cap: start the file again at once, dropping what was not
		// read yet (a writer faster than the reader must not fill the
		// disk). The writer appends (O_APPEND), so it continues at the new
		// end.
		if err := os.Truncate(tf.path, 0); err == nil {
			if unread := size - tf.off; unread > 0 {
				t.emit(fmt.Sprintf("%s%d bytes of output dropped (the service writes faster than it can be reported)", tf.prefix, unread))
			}
			tf.off, tf.partial = 0, nil
		}
		return true
	}
	if behind := size - tf.off; behind > skipAfter {
		t.emit(fmt.Sprintf("%s%d bytes of output skipped (the service writes faster than it can be reported)", tf.prefix, behind))
		tf.off, tf.partial = size, nil
		return true
	}
	t.readFrom(tf)
	return false
}

// readFrom reads up to readBudget bytes of tf from its offset.
func (t *tailer) readFrom(tf *tailFile) {
	buf := make([]byte, 32<<10)
	for read := 0; read < readBudget; {
		n, err := tf.f.ReadAt(buf, tf.off)
		if n > 0 {
			tf.off += int64(n)
			read += n
			t.split(tf, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (t *tailer) split(tf *tailFile, data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			tf.partial = append(tf.partial, data...)
			if len(tf.partial) >= maxLineBytes {
				t.line(tf, tf.partial[:maxLineBytes])
				tf.partial = append(tf.partial[:0], tf.partial[maxLineBytes:]...)
			}
			return
		}
		line := data[:i]
		if len(tf.partial) > 0 {
			line = append(tf.partial, line...)
			tf.partial = nil
		}
		t.line(tf, line)
		data = data[i+1:]
	}
}

func (t *tailer) line(tf *tailFile, line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) > maxLineBytes {
		line = line[:maxLineBytes]
	}
	if tf == t.files[1] && len(bytes.TrimSpace(line)) > 0 {
		t.lastErr = string(line)
	}
	if t.limit.allow() {
		t.emit(tf.prefix + string(line))
	}
}

// lineLimiter allows perSecond lines per one-second window and counts the
// rest.
type lineLimiter struct {
	perSecond  int
	window     time.Time // start of the current window
	n          int       // lines allowed in the window
	suppressed int       // lines refused in the window
}

// roll starts a new window if the current one is over and returns how many
// lines the finished window suppressed.
func (l *lineLimiter) roll(now time.Time) int {
	if now.Sub(l.window) < time.Second {
		return 0
	}
	s := l.suppressed
	l.window, l.n, l.suppressed = now, 0, 0
	return s
}

// allow counts a line in the current window (roll starts windows) and
// reports whether it may be emitted.
func (l *lineLimiter) allow() bool {
	if l.n < l.perSecond {
		l.n++
		return true
	}
	l.suppressed++
	return false
}
