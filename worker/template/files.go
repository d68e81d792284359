package template

import (
	"fmt"
	"io"
	"os"
)

// MaxFileSize is the largest template file the worker reads, in bytes:
// compose.yaml, .env, template.json, an env_file or a configs file. The
// catalogue is held in memory and configs are copied into job records, so
// a template's files are small; a larger one is refused naming it.
const MaxFileSize = 1 << 20

// readFile reads path, a file of a template version. It must be a regular
// file (after symlinks: a device or FIFO would be read forever, or block
// the open) of at most MaxFileSize bytes. A missing file's error wraps
// fs.ErrNotExist.
func readFile(path string) ([]byte, error) {
	if err := checkRegular(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// checkRegular says why path (symlinks followed) is not a regular file of
// at most MaxFileSize bytes; nil if it is.
func checkRegular(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Size() > MaxFileSize {
		return fmt.Errorf("%s is larger than %d bytes", path, MaxFileSize)
	}
	return nil
}
