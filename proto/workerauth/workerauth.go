// Package workerauth implements the proofs of the worker session handshake
// defined in proto/worker.proto: the worker proves to the manager, and the
// manager to the worker, that it holds the node credential, without either
// sending the credential itself.
package workerauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// gRPC metadata keys the manager sets when it opens NodeControllerStream.
const (
	// MetadataNodeID carries the node id the manager expects to reach.
	MetadataNodeID = "norsk-node-id"
	// MetadataNonce carries the manager's fresh random nonce (hex).
	MetadataNonce = "norsk-nonce"
)

// Reasons of refused registrations, sent by the manager as the Reason of a
// google.rpc.ErrorInfo status detail in ErrorDomain, so that a worker can
// tell them apart without reading messages.
const (
	ErrorDomain = "norsk-manager"
	// ReasonTokenUnknown: no slot has this registration token.
	ReasonTokenUnknown = "TOKEN_UNKNOWN"
	// ReasonTokenRevoked: the slot of the token, or of the node credential,
	// presented was deregistered. A worker that presented its stored
	// credential stops the jobs it runs (nobody will manage them again).
	ReasonTokenRevoked = "TOKEN_REVOKED"
	// ReasonCredentialUnknown: no bound slot has this node credential.
	ReasonCredentialUnknown = "CREDENTIAL_UNKNOWN"
	// ReasonSlotBound: the slot is bound to another worker (its token was
	// presented without the matching credential).
	ReasonSlotBound = "SLOT_BOUND"
	// ReasonIdentityInUse: another worker, at another address, holds a live
	// session with this node's identity (a copied --state-dir?).
	ReasonIdentityInUse = "IDENTITY_IN_USE"
	// ReasonNodeTerminated: an operator terminated the node; its worker is
	// refused until the slot is deregistered and registered again.
	ReasonNodeTerminated = "NODE_TERMINATED"
	// ReasonCertChanged: the node's worker registered with a self-signed
	// certificate, whose fingerprint the manager pinned, and now presents
	// another (or none): its key was lost or replaced. A new key is a new
	// worker: it needs a new slot and token.
	ReasonCertChanged = "CERT_CHANGED"
)

// WorkerProof is hex(HMAC-SHA256(credential, "norsk-worker-proof|" + nodeID
// + "|" + managerNonce)): WorkerHello.token.cookie.
func WorkerProof(credential, nodeID, managerNonce string) string {
	return mac(credential, "norsk-worker-proof|"+nodeID+"|"+managerNonce)
}

// ManagerProof is hex(HMAC-SHA256(credential, "norsk-manager-proof|" +
// nodeID + "|" + workerNonce)): WorkerHelloResponse.signature.
func ManagerProof(credential, nodeID, workerNonce string) string {
	return mac(credential, "norsk-manager-proof|"+nodeID+"|"+workerNonce)
}

// Equal compares two proofs in constant time.
func Equal(a, b string) bool { return hmac.Equal([]byte(a), []byte(b)) }

// NewNonce returns 16 random bytes, hex encoded.
func NewNonce() string { return randomHex(16) }

// NewSecret returns 32 random bytes from the OS CSPRNG, hex encoded: the
// form of registration tokens and node credentials.
func NewSecret() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("workerauth: crypto/rand failed: " + err.Error()) // never on Linux ≥ 3.17
	}
	return hex.EncodeToString(b)
}

func mac(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}
