package docker

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// maxLineBytes caps one reported output line; longer lines are cut.
const maxLineBytes = 4096

// finishWait bounds how long the end of a run waits for the rest of its
// output (the stream ends right after the container stops).
const finishWait = 500 * time.Millisecond

// output follows one run of a container's output (the engine's log
// stream, stdout and stderr) and reports it as job_info container_event
// lines, at most Config.OutputLinesPerSecond per second; the excess is
// counted and reported as one note. It remembers the last line for
// failure reasons.
type output struct {
	done   chan struct{} // closed when the stream ended
	cancel context.CancelFunc

	mu   sync.Mutex
	last string
}

// follow starts following s's output from since, until the job ends
// or the output's finish.
func (j *job) follow(s *service, since time.Time) *output {
	ctx, cancel := context.WithCancel(j.sup.Context())
	o := &output{done: make(chan struct{}), cancel: cancel}
	id := s.id
	emit := func(text string) { j.containerEvent(s, text) }
	lim := &lineLimiter{perSecond: j.r.cfg.OutputLinesPerSecond, emit: emit}
	j.r.wg.Add(1)
	go func() {
		defer j.r.wg.Done()
		defer close(o.done)
		rc, err := j.r.cli.ContainerLogs(ctx, id, container.LogsOptions{
			ShowStdout: true, ShowStderr: true, Follow: true,
			Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("cannot follow the container's output", "error", err)
			}
			return
		}
		defer rc.Close()
		stdout := &lineWriter{line: func(l string) { o.setLast(l); lim.line(l) }}
		stderr := &lineWriter{line: func(l string) { o.setLast(l); lim.line(l) }}
		_, _ = stdcopy.StdCopy(stdout, stderr, rc)
		stdout.flush()
		stderr.flush()
		lim.flush()
	}()
	return o
}

func (o *output) setLast(l string) {
	o.mu.Lock()
	o.last = l
	o.mu.Unlock()
}

// finish waits briefly for the rest of the run's output, stops following
// and returns the last line. Safe on nil and to call twice.
func (o *output) finish() string {
	if o == nil {
		return ""
	}
	select {
	case <-o.done:
	case <-time.After(finishWait):
	}
	o.cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// lineWriter splits written bytes into lines.
type lineWriter struct {
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLineBytes {
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) emit(b []byte) {
	b = bytes.TrimRight(b, "\r")
	if len(b) > maxLineBytes {
		b = b[:maxLineBytes]
	}
	if len(b) > 0 {
		w.line(string(b))
	}
}

// lineLimiter passes at most perSecond lines per second (fixed windows)
// and reports the number it suppressed.
type lineLimiter struct {
	perSecond  int
	emit       func(string)
	window     time.Time
	n          int
	suppressed int
}

func (l *lineLimiter) line(text string) {
	now := time.Now()
	if now.Sub(l.window) >= time.Second {
		l.flush()
		l.window, l.n = now, 0
	}
	if l.n >= l.perSecond {
		l.suppressed++
		return
	}
	l.n++
	l.emit(text)
}

func (l *lineLimiter) flush() {
	if l.suppressed > 0 {
		l.emit(fmt.Sprintf("%d lines suppressed (more than %d lines per second)", l.suppressed, l.perSecond))
		l.suppressed = 0
	}
}
