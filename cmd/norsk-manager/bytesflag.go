package main

import (
	"fmt"

	"github.com/dustin/go-humanize"
)

// bytesFlag is a byte count given with units ("256MiB", "1GiB", "500MB",
// "0"): IEC units (KiB, MiB, GiB) are powers of 1024, SI units (kB, MB,
// GB) of 1000, a bare number is bytes.
type bytesFlag uint64

// String prints the value in IEC units ("256 MiB").
func (b *bytesFlag) String() string { return humanize.IBytes(uint64(*b)) }

// Set parses s; an error names the accepted forms (pflag prefixes the flag).
func (b *bytesFlag) Set(s string) error {
	v, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%q is not a size: give bytes with a unit, like 256MiB, 1GiB or 0", s)
	}
	*b = bytesFlag(v)
	return nil
}

// Type names the value in --help.
func (b *bytesFlag) Type() string { return "size" }
