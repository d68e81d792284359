package ociemu

import (
	"crypto"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
)

// APIKey is an OCI API signing key: an RSA key pair of a user of a tenancy.
// OCI names the key by "tenancy/user/fingerprint" (the keyId of the
// signature).
type APIKey struct {
	// Tenancy is the OCID of the tenancy.
	Tenancy string
	// User is the OCID of the user the key belongs to.
	User string
	// PrivateKey is the key pair.
	PrivateKey *rsa.PrivateKey
}

// NewAPIKey makes a fresh 2048-bit RSA API key for user of tenancy.
func NewAPIKey(tenancy, user string) (*APIKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &APIKey{Tenancy: tenancy, User: user, PrivateKey: k}, nil
}

// Fingerprint returns the key's fingerprint the way OCI shows it: the MD5
// of the DER (PKIX) public key as colon-separated lower-case hex pairs.
func (k *APIKey) Fingerprint() string { return Fingerprint(&k.PrivateKey.PublicKey) }

// KeyID returns the keyId the SDK puts into its signatures:
// "tenancy/user/fingerprint".
func (k *APIKey) KeyID() string { return k.Tenancy + "/" + k.User + "/" + k.Fingerprint() }

// PrivateKeyPEM returns the private key as a PKCS#1 PEM block ("RSA PRIVATE
// KEY"), the form common.NewRawConfigurationProvider takes.
func (k *APIKey) PrivateKeyPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k.PrivateKey)}))
}

// ConfigurationProvider returns an SDK configuration provider that signs
// with this key, for region (a region identifier such as "us-ashburn-1";
// use one the SDK knows, or it looks for region metadata in the
// environment and the home directory).
func (k *APIKey) ConfigurationProvider(region string) common.ConfigurationProvider {
	return common.NewRawConfigurationProvider(k.Tenancy, k.User, region, k.Fingerprint(), k.PrivateKeyPEM(), nil)
}

// Fingerprint returns the OCI fingerprint of an RSA public key: the MD5 of
// its DER (PKIX) encoding as colon-separated lower-case hex pairs.
func Fingerprint(pub *rsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err) // an *rsa.PublicKey always marshals
	}
	sum := md5.Sum(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(parts, ":")
}

// bodyMethods are the methods whose signature must cover the body: the
// SDK's default body-hash predicate.
func bodyMethod(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// parseAuthorization parses `Signature k="v",k="v",…` into its parameters.
func parseAuthorization(h string) (map[string]string, error) {
	const scheme = "signature "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return nil, fmt.Errorf("authorization scheme is not Signature")
	}
	s := h[len(scheme):]
	params := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return params, nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("malformed signature parameter %q", s)
		}
		key := strings.ToLower(strings.TrimSpace(s[:eq]))
		s = s[eq+1:]
		if !strings.HasPrefix(s, `"`) {
			return nil, fmt.Errorf("signature parameter %s is not quoted", key)
		}
		end := strings.IndexByte(s[1:], '"')
		if end < 0 {
			return nil, fmt.Errorf("signature parameter %s is not terminated", key)
		}
		if _, dup := params[key]; dup {
			return nil, fmt.Errorf("signature parameter %s repeated", key)
		}
		params[key] = s[1 : 1+end]
		s = s[end+2:]
	}
}

// verify checks the draft-cavage HTTP signature of r (with its body
// already read into body) the way OCI does for API keys, and returns the
// keyId that signed it, or why the request is not authenticated.
func (s *Server) verify(r *http.Request, body []byte, now time.Time) (string, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", fmt.Errorf("no Authorization header")
	}
	params, err := parseAuthorization(auth)
	if err != nil {
		return "", err
	}
	keyID := params["keyid"]
	if keyID == "" {
		return "", fmt.Errorf("signature has no keyId")
	}
	if alg := params["algorithm"]; alg != "rsa-sha256" {
		return keyID, fmt.Errorf("signature algorithm %q is not rsa-sha256", alg)
	}
	if v, ok := params["version"]; ok && v != "1" {
		return keyID, fmt.Errorf("signature version %q is not 1", v)
	}
	sig, err := base64.StdEncoding.DecodeString(params["signature"])
	if err != nil || len(sig) == 0 {
		return keyID, fmt.Errorf("signature is not base64")
	}
	// draft-cavage: without a headers parameter only Date is signed; OCI
	// needs more than that, so the check below rejects it.
	headersParam := params["headers"]
	if headersParam == "" {
		headersParam = "date"
	}
	headers := strings.Fields(strings.ToLower(headersParam))
	listed := map[string]bool{}
	for _, h := range headers {
		listed[h] = true
	}
	required := []string{"(request-target)", "host"}
	if bodyMethod(r.Method) {
		required = append(required, "content-length", "content-type", "x-content-sha256")
	}
	for _, h := range required {
		if !listed[h] {
			return keyID, fmt.Errorf("signature does not cover %s", h)
		}
	}
	if !listed["date"] && !listed["x-date"] {
		return keyID, fmt.Errorf("signature does not cover date or x-date")
	}

	s.mu.Lock()
	pub := s.keys[keyID]
	s.mu.Unlock()
	if pub == nil {
		return keyID, fmt.Errorf("unknown keyId %q", keyID)
	}

	lines := make([]string, len(headers))
	for i, h := range headers {
		var v string
		switch h {
		case "(request-target)":
			v = strings.ToLower(r.Method) + " " + r.RequestURI
		case "host":
			v = r.Host
		case "content-length":
			v = r.Header.Get("Content-Length")
			if v == "" && r.ContentLength >= 0 {
				v = strconv.FormatInt(r.ContentLength, 10)
			}
		default:
			vs := r.Header.Values(h)
			if len(vs) == 0 {
				return keyID, fmt.Errorf("signed header %s is absent", h)
			}
			v = strings.Join(vs, ", ")
		}
		lines[i] = h + ": " + v
	}
	hashed := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, hashed[:], sig); err != nil {
		return keyID, fmt.Errorf("signature does not verify with the key of %q", keyID)
	}

	dateHeader := "date"
	if !listed["date"] {
		dateHeader = "x-date"
	}
	date, err := http.ParseTime(r.Header.Get(dateHeader))
	if err != nil {
		return keyID, fmt.Errorf("%s header %q is not an HTTP date", dateHeader, r.Header.Get(dateHeader))
	}
	if skew := now.Sub(date); skew > s.opts.MaxClockSkew || -skew > s.opts.MaxClockSkew {
		return keyID, fmt.Errorf("%s %s is %v from the server's clock", dateHeader, date.Format(time.RFC3339), skew)
	}

	if bodyMethod(r.Method) {
		sum := sha256.Sum256(body)
		if got, want := r.Header.Get("X-Content-Sha256"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
			return keyID, fmt.Errorf("x-content-sha256 %q does not match the body (%q)", got, want)
		}
		if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			return keyID, fmt.Errorf("content-length %q does not match the body (%d bytes)", cl, len(body))
		}
	}
	return keyID, nil
}
