package robustness

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// Standalone is a testing.TB for running the suite outside go test (go
// run ./test/bench robustness): logs go to a writer, TempDir is under a
// directory of its own, cleanups run at Close, and Fatal, FailNow and
// Skip end the function given to Do (they must be called from Do's
// goroutine, as testing requires of a test's). The embedded TB is nil:
// only the methods below may be called, which are every method testproc
// and this package use.
type Standalone struct {
	testing.TB
	name string
	dir  string // parent of TempDir's directories

	mu       sync.Mutex
	out      io.Writer // guarded by mu
	failed   bool      // guarded by mu
	skipped  bool      // guarded by mu
	cleanups []func()  // guarded by mu
}

// stop is the panic value of Fatal, FailNow and Skip.
type stop struct{}

// NewStandalone returns a Standalone named name that logs to out and
// keeps its temporary directories under a fresh directory of the system
// temp dir (the firewall's RunAs needs them there).
func NewStandalone(name string, out io.Writer) (*Standalone, error) {
	dir, err := os.MkdirTemp("", "norsk-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("create a temporary directory: %w", err)
	}
	return &Standalone{name: name, dir: dir, out: out}, nil
}

// Dir is the directory under which TempDir creates directories.
func (s *Standalone) Dir() string { return s.dir }

// Do runs f with s, returning an error if f failed s (Error, Fatal) or
// skipped.
func (s *Standalone) Do(f func(t testing.TB)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stop); !ok {
				panic(r)
			}
		}
		switch {
		case s.Failed():
			err = fmt.Errorf("%s failed (see its log)", s.name)
		case s.Skipped():
			err = fmt.Errorf("%s was skipped (see its log)", s.name)
		}
	}()
	f(s)
	return nil
}

// Close runs the cleanups, last registered first, and removes the
// temporary directories unless keep.
func (s *Standalone) Close(keep bool) {
	s.mu.Lock()
	cs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	if !keep {
		os.RemoveAll(s.dir)
	}
}

// Helper does nothing.
func (s *Standalone) Helper() {}

// Name returns the name given to NewStandalone.
func (s *Standalone) Name() string { return s.name }

// Log logs its arguments, as fmt.Sprintln does.
func (s *Standalone) Log(args ...any) { s.write(fmt.Sprintln(args...)) }

// Logf logs a line.
func (s *Standalone) Logf(format string, args ...any) { s.write(fmt.Sprintf(format, args...) + "\n") }

// Error logs and marks s failed.
func (s *Standalone) Error(args ...any) { s.Fail(); s.Log(args...) }

// Errorf logs and marks s failed.
func (s *Standalone) Errorf(format string, args ...any) { s.Fail(); s.Logf(format, args...) }

// Fatal is Error, then FailNow.
func (s *Standalone) Fatal(args ...any) { s.Error(args...); s.FailNow() }

// Fatalf is Errorf, then FailNow.
func (s *Standalone) Fatalf(format string, args ...any) { s.Errorf(format, args...); s.FailNow() }

// Fail marks s failed.
func (s *Standalone) Fail() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = true
}

// FailNow marks s failed and ends Do's function.
func (s *Standalone) FailNow() { s.Fail(); panic(stop{}) }

// Failed reports whether s failed.
func (s *Standalone) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Skip logs and ends Do's function as skipped.
func (s *Standalone) Skip(args ...any) { s.Log(args...); s.SkipNow() }

// Skipf logs and ends Do's function as skipped.
func (s *Standalone) Skipf(format string, args ...any) { s.Logf(format, args...); s.SkipNow() }

// SkipNow ends Do's function as skipped.
func (s *Standalone) SkipNow() {
	s.mu.Lock()
	s.skipped = true
	s.mu.Unlock()
	panic(stop{})
}

// Skipped reports whether s was skipped.
func (s *Standalone) Skipped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

// Cleanup registers f to run at Close.
func (s *Standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// TempDir returns a fresh directory under Dir.
func (s *Standalone) TempDir() string {
	d, err := os.MkdirTemp(s.dir, "t")
	if err != nil {
		s.Fatalf("create a temporary directory: %v", err)
	}
	return d
}

// ArtifactDir is Dir.
func (s *Standalone) ArtifactDir() string { return s.dir }

// Context returns a background context.
func (s *Standalone) Context() context.Context { return context.Background() }

// Output returns the log writer.
func (s *Standalone) Output() io.Writer { return writerFunc(s.write) }

// Setenv sets an environment variable (not restored).
func (s *Standalone) Setenv(key, value string) { os.Setenv(key, value) }

// Attr logs an attribute.
func (s *Standalone) Attr(key, value string) { s.Logf("attr %s=%s", key, value) }

func (s *Standalone) write(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	io.WriteString(s.out, line)
}

type writerFunc func(string)

func (f writerFunc) Write(p []byte) (int, error) { f(string(p)); return len(p), nil }
