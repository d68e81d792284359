//go:build !unix

package worker

import "io/fs"

// fileOwner reports no owner on platforms without file owners.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
