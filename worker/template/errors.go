package template

import (
	"errors"
	"fmt"
)

var (
	// ErrKeyNotAllowed is returned (inside a *RefusalError naming the file
	// and the key path) for a compose file that uses a key outside the
	// allow-list (allowlist.go): the version is left out of the catalogue.
	ErrKeyNotAllowed = errors.New("template: compose key not supported")

	// ErrBadTemplate is returned (inside a *RefusalError naming the file)
	// for a template version that cannot be offered for another reason: a
	// bad name or version, a missing or unparsable compose.yaml, a bad
	// .env or template.json, a compose file compose-go refuses.
	ErrBadTemplate = errors.New("template: template version unusable")
)

// RefusalError says why a template version was left out of the catalogue.
// It wraps ErrKeyNotAllowed or ErrBadTemplate, and the cause.
type RefusalError struct {
	// Name and Version are the template's directory names.
	Name, Version string
	// File is the path of the file at fault (or of the version's
	// directory when no file is).
	File string
	// KeyPath is the dotted path of the refused key in the compose file
	// (services.web.privileged, services.web.ports[0].mode); empty when
	// the refusal is not about one key.
	KeyPath string
	// Err is ErrKeyNotAllowed or ErrBadTemplate, possibly wrapping the
	// cause.
	Err error
}

// Error names the file, the key path if any, and the reason.
func (e *RefusalError) Error() string {
	if e.KeyPath != "" {
		return fmt.Sprintf("template %s %s: %s: %s: %v", e.Name, e.Version, e.File, e.KeyPath, e.Err)
	}
	return fmt.Sprintf("template %s %s: %s: %v", e.Name, e.Version, e.File, e.Err)
}

// Unwrap returns Err.
func (e *RefusalError) Unwrap() error { return e.Err }
