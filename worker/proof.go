package worker

import (
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// WorkerProof returns the proof a worker holding credential sends in
// hello.token.cookie (proto/worker.proto handshake; see
// workerauth.WorkerProof): managerNonce is the "norsk-nonce" metadata of the
// session.
func WorkerProof(credential string, nodeID NodeID, managerNonce string) string {
	return workerauth.WorkerProof(credential, string(nodeID), managerNonce)
}

// ManagerProof returns the signature a manager sends in
// hello_response.signature (workerauth.ManagerProof): workerNonce is
// hello.token.signature.
func ManagerProof(credential string, nodeID NodeID, workerNonce string) string {
	return workerauth.ManagerProof(credential, string(nodeID), workerNonce)
}

// ProofEqual compares two hex proofs in constant time.
func ProofEqual(a, b string) bool { return workerauth.Equal(a, b) }

// newNonce returns 16 random bytes in hex.
func newNonce() (string, error) { return workerauth.NewNonce(), nil }
