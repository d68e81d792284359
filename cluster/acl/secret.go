package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
)

// secretBytes is the entropy of a token secret: 256 bits.
const secretBytes = 32

// secretPrefix marks a token secret, so that secret scanners and operators
// recognise one ("nmt": Norsk Manager token).
const secretPrefix = "nmt_"

// NewSecret returns a new token secret: secretPrefix and 32 bytes from
// crypto/rand in unpadded base64url (47 characters). It fails only if the
// system's random source does.
func NewSecret() (string, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("acl: read random secret: %w", err)
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashSecret returns the SHA-256 of secret: what the store keeps and
// indexes. A 256-bit random secret needs no salt or slow hash: nothing
// short of the secret itself finds its preimage.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// SameHash compares two secret hashes in constant time.
func SameHash(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

// bearerSecret returns the secret of an "authorization" metadata value
// "Bearer <secret>" (the scheme in any case, as RFC 6750 allows), or an
// error saying what is wrong with it.
func bearerSecret(v string) (string, error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "bearer") {
		return "", fmt.Errorf(`the authorization metadata "Bearer" has no token secret after it`)
	}
	scheme, secret, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", fmt.Errorf(`the authorization metadata must be "Bearer <token secret>"`)
	}
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return "", fmt.Errorf(`the authorization metadata "Bearer" has no token secret after it`)
	}
	return secret, nil
}
