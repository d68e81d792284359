package node

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTLSUserData(t *testing.T) {
	ca := "-----BEGIN CERTIFICATE-----\nMIIBazCCARGgAwIBAgIQ\nAbCd==\n-----END CERTIFICATE-----\n"
	cases := []struct {
		name       string
		ca         string
		serverName string
		wantCA     string
		wantFlags  []string
		notWant    []string
	}{
		{"ca and server name", ca, "server.norsk", strings.TrimSpace(ca),
			[]string{"--ca-cert=" + WorkerCAPath, "--self-signed", "--tls-server-name=server.norsk", "--token=tok-1", "--manager-url=10.0.0.1:6790,10.0.0.2:6790"}, nil},
		{"no server name", ca, "", strings.TrimSpace(ca), []string{"--ca-cert=" + WorkerCAPath}, []string{"--tls-server-name"}},
		{"heredoc end and control characters in the bundle are dropped", ca + caHeredoc + "\nrm -rf /\x1b[0m\n", "server.norsk",
			strings.TrimSpace(ca), nil, []string{"\x1b", "rm -rf"}},
		{"a server name that is no DNS name is left out", ca, "x; reboot", strings.TrimSpace(ca), nil, []string{"--tls-server-name", "reboot"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TLSUserData("n1", "tok-1", []string{"10.0.0.1:6790", "10.0.0.2:6790"}, []byte(tc.ca), tc.serverName)
			for _, f := range tc.wantFlags {
				require.Contains(t, s, f)
			}
			for _, f := range tc.notWant {
				require.NotContains(t, s, f)
			}
			// The bundle is the heredoc's body, and the heredoc ends once.
			_, body, ok := strings.Cut(s, "<<'"+caHeredoc+"'\n")
			require.True(t, ok, s)
			body, _, ok = strings.Cut(body, "\n"+caHeredoc+"\n")
			require.True(t, ok, s)
			require.Equal(t, tc.wantCA, body)
			require.Equal(t, 2, strings.Count(s, caHeredoc), "heredoc markers")
			require.Equal(t, "tok-1", TokenFromUserData(s))
			if sh, err := exec.LookPath("sh"); err == nil {
				out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput()
				require.NoError(t, err, "sh -n: %s\n%s", out, s)
			}
		})
	}
}
