package docker

import (
	"fmt"
	"path/filepath"
)

// checkBinds refuses a bind mount of specs that would show a container a
// protected host path (Config.ProtectedPaths: the worker's state
// directory and TLS key): a source that is a protected path, is inside
// one, or is a directory above one. Sources and protected paths are
// compared as given and with symbolic links resolved (Docker resolves
// them too). The error names the service, the mount and the protected
// path. The runtime's own bind mounts (write_files, compose configs) are
// not binds of a spec and are not checked.
func checkBinds(specs []*serviceSpec, protected []string) error {
	if len(protected) == 0 {
		return nil
	}
	guarded := make([][]string, len(protected))
	for i, p := range protected {
		guarded[i] = pathForms(p)
	}
	for _, s := range specs {
		for i, b := range s.Binds {
			for pi, forms := range guarded {
				if overlaps(pathForms(b.Source), forms) {
					return fmt.Errorf("service %q binds[%d]: the bind mount of %s at %s would show the container %s, which holds the worker's secrets (its state directory or TLS key); "+
						"bind mounts may not reach it: mount another host path", s.Name, i, b.Source, b.Target, protected[pi])
				}
			}
		}
	}
	return nil
}

// pathForms returns path cleaned and, when it exists, with its symbolic
// links resolved.
func pathForms(path string) []string {
	forms := []string{filepath.Clean(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != forms[0] {
		forms = append(forms, real)
	}
	return forms
}

// overlaps reports whether a form of src is a form of protected, inside
// it, or above it.
func overlaps(src, protected []string) bool {
	for _, s := range src {
		for _, p := range protected {
			if within(p, s) || within(s, p) {
				return true
			}
		}
	}
	return false
}

// within reports whether path is dir or inside it (both clean).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}
