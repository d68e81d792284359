package main

// exitError is an error that carries its process exit code: main exits
// with ExitCode instead of 1. Subcommands with documented exit codes
// (verify) return it.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process exit code for e.
func (e *exitError) ExitCode() int { return e.code }
