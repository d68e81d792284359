package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
)

// IdentityFile is the name, inside Config.StateDir, of the file holding the
// node identity (mode 0600, JSON).
const IdentityFile = "identity.json"

// SelfSignedCertFile is the name, inside Config.StateDir, of the worker's
// self-signed certificate and key (norsk-ctl --mode=worker --self-signed;
// mode 0600, PEM), made at the first start and kept: the manager pins the
// certificate at registration (Config.CertSHA256).
const SelfSignedCertFile = "worker-tls.pem"

// Identity is what a registered worker keeps in its state directory across
// restarts, so that it comes back as the same node with the same jobs.
type Identity struct {
	// NodeID is the node id the manager assigned.
	NodeID NodeID `json:"node_id"`
	// Credential is the secret proved on every session (HMAC key).
	Credential string `json:"credential"`
	// NodeName is the cluster slot's name, for operators.
	NodeName string `json:"node_name"`
	// TokenSHA256 is the hex SHA-256 of the registration token the identity
	// was obtained with; a worker started with another token registers as a
	// new node instead of presenting this credential.
	TokenSHA256 string `json:"token_sha256"`
}

// tokenDigest returns the hex SHA-256 of a registration token.
func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ReadIdentity returns the node identity stored in the state directory
// dir by an earlier registration. ok is false, with a nil error, when
// there is none; an unreadable or invalid file is an error matching
// ErrBadStoredIdentity, naming the file and what to do. It only reads: a
// caller may use it before the state directory is locked.
func ReadIdentity(dir string) (id Identity, ok bool, err error) { return loadIdentity(dir) }

// loadIdentity reads the identity from dir. ok is false, with a nil error,
// when there is none.
func loadIdentity(dir string) (id Identity, ok bool, err error) {
	path := filepath.Join(dir, IdentityFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("%w: read %s: %w", ErrBadStoredIdentity, path, err)
	}
	if err := json.Unmarshal(data, &id); err != nil {
		return Identity{}, false, fmt.Errorf("%w: %s is not valid JSON (%w). %s", ErrBadStoredIdentity, path, err, badIdentityAdvice())
	}
	if id.NodeID == "" || id.Credential == "" {
		return Identity{}, false, fmt.Errorf("%w: %s lacks node_id or credential. %s", ErrBadStoredIdentity, path, badIdentityAdvice())
	}
	return id, true, nil
}

// badIdentityAdvice says what to do about an unusable identity file. Its
// slot stays bound to the credential that was in it, so the slot's token
// cannot bind a new worker: only a restored file or a new slot helps.
func badIdentityAdvice() string {
	return "It held this worker's node credential. Restore it from a backup to come back as the same node with its jobs; " +
		"or move it aside (e.g. to identity.json.broken) and start the worker with --token of a new cluster slot " +
		"(norsk-ctl slot register NAME) to join as a new node (the manager stops the jobs still running here for the old node), " +
		"then deregister the old slot (norsk-ctl slot deregister NODE_ID)"
}

// saveIdentity writes id to dir atomically with mode 0600.
func saveIdentity(dir string, id Identity) error {
	data, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node identity: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, IdentityFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("save node identity: %w", err)
	}
	return nil
}
