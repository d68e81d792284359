package pki

import (
	"errors"
	"strings"
)

var (
	// ErrFileExists is returned (inside a *FilesExistError) by WriteNew when
	// a file it would write already exists: nothing was written.
	ErrFileExists = errors.New("pki: file exists")

	// ErrBadPEM is returned when a file holds no PEM block of the expected
	// type (a certificate or an EC private key).
	ErrBadPEM = errors.New("pki: no PEM data of the expected type")

	// ErrNotCA is returned by ParseCA for a certificate that may not sign
	// others (not a CA, or no cert-sign key usage).
	ErrNotCA = errors.New("pki: certificate is not a certificate authority")

	// ErrKeyMismatch is returned when a private key does not belong to the
	// certificate it is loaded with (a renewal that replaced one file of
	// the pair but not yet the other).
	ErrKeyMismatch = errors.New("pki: private key does not match the certificate")
)

// FilesExistError names the files WriteNew refused to overwrite. It
// matches ErrFileExists.
type FilesExistError struct {
	// Paths are the existing files, in the order they were to be written.
	Paths []string
}

func (e *FilesExistError) Error() string {
	return "refusing to overwrite existing files: " + strings.Join(e.Paths, ", ") + " (move them away or choose another --dir or --name)"
}

// Is makes errors.Is(err, ErrFileExists) true.
func (e *FilesExistError) Is(target error) bool { return target == ErrFileExists }
