package node

import (
	"fmt"
	"strings"
)

// caHeredoc ends the CA bundle in a TLSUserData script. PEM text never
// contains it.
const caHeredoc = "NORSK_MANAGER_CA_EOF"

// WorkerCAPath is where a TLSUserData script writes the managers' CA
// bundle on the instance.
const WorkerCAPath = "/etc/norsk-worker/manager-ca.pem"

// TLSUserData is DefaultUserData for managers that serve TLS: the script
// first writes caPEM (the CA bundle that signed the managers'
// certificates: public, nothing secret) to WorkerCAPath, then starts the
// worker with --ca-cert (it registers over TLS and verifies the manager;
// on its dial-back port it admits only a manager presenting a certificate
// of that CA), --self-signed (it makes its own key at the first boot and
// serves the dial-back with a self-signed certificate, which the manager
// pins at the registration: certpin.go) and, if serverName is given,
// --tls-server-name (the name every manager's certificate carries, e.g.
// server.norsk, since a URL's host may not be in it). The user data
// carries no private key (docs/design/security.md, "Cloud workers"): the
// single-use token is its only secret. Lines of caPEM that are not
// PEM text (a line equal to the heredoc end, control characters) are
// dropped, so the CA cannot inject commands into the script.
func TLSUserData(nodeID, token string, managerURLs []string, caPEM []byte, serverName string) string {
	var ca strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(caPEM)), "\n") {
		line = strings.TrimRight(line, "\r")
		if line == caHeredoc || strings.ContainsFunc(line, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			continue
		}
		ca.WriteString(line)
		ca.WriteByte('\n')
	}
	name := ""
	if serverName != "" && !strings.ContainsFunc(serverName, func(r rune) bool { return !isNameRune(r) }) {
		name = " --tls-server-name=" + serverName
	}
	return fmt.Sprintf(`#!/bin/sh
# Norsk worker bootstrap for node %s (written by the manager).
set -e
mkdir -p %s
cat > %s <<'%s'
%s%s
ADDR=$(hostname -I 2>/dev/null | cut -d' ' -f1)
exec norsk-ctl --mode=worker --token=%s --manager-url=%s --ca-cert=%s --self-signed%s \
  --listen=0.0.0.0:7001 --advertise="${ADDR:-$(hostname)}" --state-dir=/var/lib/norsk-worker
`, nodeID, WorkerCAPath[:strings.LastIndexByte(WorkerCAPath, '/')], WorkerCAPath, caHeredoc, ca.String(), caHeredoc,
		token, strings.Join(managerURLs, ","), WorkerCAPath, name)
}

// isNameRune reports whether r may appear in a DNS name.
func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-'
}
