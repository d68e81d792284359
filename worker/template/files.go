package template

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
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

// checkInside says why path, a file a compose file refers to, cannot be
// read for a job: it must resolve (symlinks followed) to a regular file
// inside dir, the version's directory, of at most MaxFileSize bytes. The
// worker reads these files itself (often as root) into the containers'
// environment and the job's record, so a file outside the template — by
// "../", an absolute path, a symlink or a path a job's parameter chose —
// would hand a job any file of the host.
func checkInside(dir, path string) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("template directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("%s is outside the template's directory (a template's files must be its own)", path)
	}
	return checkRegular(real)
}

// checkProjectFiles checks every env_file and configs file of p with
// checkInside before any is read; the error names the key
// (services.NAME.env_file[i], configs.NAME.file). A missing env_file
// marked required: false is left to compose-go (it skips it); a missing
// configs file to convert.go, which names the service using it.
func checkProjectFiles(dir string, p *types.Project) error {
	for _, name := range sortedNames(p.Services) {
		for i, ef := range p.Services[name].EnvFiles {
			err := checkInside(dir, ef.Path)
			if errors.Is(err, fs.ErrNotExist) && !bool(ef.Required) {
				continue
			}
			if err != nil {
				return fmt.Errorf("services.%s.env_file[%d]: %w", name, i, err)
			}
		}
	}
	for _, name := range sortedNames(p.Configs) {
		if f := p.Configs[name].File; f != "" {
			// A missing file is named by the service using it (convert.go).
			if err := checkInside(dir, f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("configs.%s.file: %w", name, err)
			}
		}
	}
	return nil
}
