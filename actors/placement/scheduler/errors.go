package scheduler

import "errors"

var (
	// ErrInvalidAsk is returned (wrapped, with the field and the reason) by
	// View.Select when the Ask itself is malformed: no job or role, a
	// requirement that is negative or not a finite number, a co-located
	// member naming the asked job. Nothing is decided. The engine treats it
	// as a bug in how it built the Ask (the gateway validates job
	// requirements before they are stored).
	ErrInvalidAsk = errors.New("scheduler: invalid ask")

	// ErrInvalidView is returned (wrapped) by NewView when two nodes share an
	// id: the view cannot tell them apart. A node record with impossible
	// values (negative capacity, NaN) is not an error: that node is kept and
	// filtered as not schedulable, so one bad record does not stop every
	// placement.
	ErrInvalidView = errors.New("scheduler: invalid view")

	// ErrAlreadyPlaced is returned (wrapped, naming the node) by View.Select
	// when the asked job role, or a co-located member's, already has a
	// placed instance in the view: a (job, role) runs at most once
	// (ARCHITECTURE §7 invariant 9). Remove the old instance from the view
	// first (View.Remove) if it is known to be gone.
	ErrAlreadyPlaced = errors.New("scheduler: job role already placed")

	// ErrInvalidPolicy is returned (wrapped, naming the field) by
	// RestartPolicy.Validate: a ceiling below 1, a window or initial
	// backoff not above 0, a max backoff below the initial one.
	ErrInvalidPolicy = errors.New("scheduler: invalid restart policy")
)
