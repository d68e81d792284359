package node

import (
	"bytes"
	"encoding/hex"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// A worker with a self-signed certificate (a cloud worker, whose user data
// carries no private key) sends the certificate's SHA-256 when it
// registers. The registration that binds the slot — the one with the
// single-use token — pins it in the node record, and every dial-back of
// the node then accepts that certificate only (Config.PinnedDialOptions),
// instead of verifying it against the CA. The pin never changes: the key
// lives in the worker's state directory next to its node credential, so a
// worker that still has the credential still has the key; one that
// presents the credential with another certificate (or none) had its key
// replaced and is refused, and a lost state directory needs a new slot,
// as it does without TLS. docs/design/security.md, "Cloud workers".

// checkCertPin refuses a re-registration of a bound slot whose
// certificate fingerprint is not the one pinned at its binding.
func (g *grain) checkCertPin(c *internalpb.MemberRegister, bound bool) *internalpb.Reply {
	pin, got := g.rec.GetWorkerCertSha256(), c.GetWorkerCertSha256()
	if !bound || bytes.Equal(pin, got) {
		return nil
	}
	g.log.Warn("refused a re-registration: the worker's certificate is not the one pinned at its registration",
		"pinned_sha256", hex.EncodeToString(pin), "presented_sha256", hex.EncodeToString(got), "address", c.GetAddress())
	return actors.FailWithReason(errorpb.Code_PERMISSION_DENIED, workerauth.ReasonCertChanged,
		"node %s: the worker registered with a certificate of sha256 %s, pinned for its dial-back; it now presents %s: "+
			"a worker whose key was lost or replaced is a new worker and needs a new slot and registration token",
		g.id, fingerprintText(pin), fingerprintText(got))
}

// fingerprintText is a fingerprint in hex, or "none".
func fingerprintText(fp []byte) string {
	if len(fp) == 0 {
		return "none (a CA-signed certificate or plaintext)"
	}
	return hex.EncodeToString(fp)
}
