package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/norsk-oss/norsk-manager/worker"
)

// Labels on every container, network and volume the runtime creates. They
// are how a restarted worker finds its projects (Restore) and how an
// operator tells them apart (`docker ps --filter label=io.norsk.job=…`).
const (
	// LabelWorker is the runtime id (StateDir/runtime-id): which worker's
	// state owns the object. Two workers on one Docker engine never touch
	// each other's objects.
	LabelWorker = "io.norsk.worker"
	// LabelProject is the project name (one per job and role).
	LabelProject = "io.norsk.project"
	// LabelJob is the job id, verbatim.
	LabelJob = "io.norsk.job"
	// LabelRole is the role, verbatim.
	LabelRole = "io.norsk.role"
	// LabelService is the service name, verbatim (containers only).
	LabelService = "io.norsk.service"
	// LabelVolume is the volume's name in the job's `volumes` (volumes
	// only).
	LabelVolume = "io.norsk.volume"
)

// maxNamePart bounds each sanitised part of a Docker object name, so that
// names stay readable and well under Docker's limits.
const maxNamePart = 40

// dockerName builds a Docker object name (containers, networks and
// volumes accept [a-zA-Z0-9][a-zA-Z0-9_.-]*) from parts: each part is
// sanitised (other characters become '_', at most maxNamePart bytes) and
// the parts are joined by '-', followed by a hash of the exact parts, so
// that different ids never share a name whatever their characters.
func dockerName(parts ...string) string {
	h := sha256.New()
	var b strings.Builder
	b.WriteString("norsk")
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
		b.WriteByte('-')
		b.WriteString(sanitise(p))
	}
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString(h.Sum(nil))[:8])
	return b.String()
}

func sanitise(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= maxNamePart {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// projectName is the project of key under runtime id rid; the per-project
// network has this name too.
func projectName(rid string, key worker.JobKey) string {
	return dockerName(rid, string(key.JobID), key.Role)
}

// containerName is the container of service svc in project.
func containerName(project, svc string) string {
	return project + "." + sanitise(svc) + "-" + shortHash(svc)
}

// volumeName is the Docker volume for the job volume vol of key.
func volumeName(rid string, key worker.JobKey, vol string) string {
	return dockerName(rid, string(key.JobID), key.Role, vol)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:6]
}
