package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The ACL token of the operator commands (issue 12 §2): --token-file or
// NORSK_TOKEN. Not --token: worker mode's --token is a slot's
// registration token, a different credential.
const (
	ctlFlagTokenFile = "token-file"
	ctlEnvToken      = "NORSK_TOKEN"
	ctlEnvTokenFile  = "NORSK_TOKEN_FILE"
)

// addTokenFlags adds --token-file to root's persistent flags.
func addTokenFlags(root *cobra.Command) {
	root.PersistentFlags().String(ctlFlagTokenFile, "", "file holding the ACL token secret sent with every call to a manager started with --acl "+
		"(env "+ctlEnvTokenFile+"; or the secret itself in "+ctlEnvToken+")")
}

// ctlToken is the ACL token secret of an operator command: the content of
// --token-file (or NORSK_TOKEN_FILE), else NORSK_TOKEN, else none.
// Surrounding whitespace (a trailing newline) is dropped.
func ctlToken(cmd *cobra.Command) (string, error) {
	path := ctlFlagOrEnv(cmd, ctlFlagTokenFile, ctlEnvTokenFile)
	if path == "" {
		return strings.TrimSpace(os.Getenv(ctlEnvToken)), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", ctlUsagef("--%s: %v", ctlFlagTokenFile, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", ctlUsagef("--%s %s: the file is empty", ctlFlagTokenFile, path)
	}
	return tok, nil
}

// newACLCommand builds "norsk-ctl acl".
func newACLCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "acl",
		Short: "Bootstrap ACLs and manage ACL tokens (managers started with --acl)",
		Long: `With --acl every call to a manager needs an ACL token, sent by norsk-ctl from
--token-file or NORSK_TOKEN. "acl bootstrap" makes the first management token,
once; with it, "acl token create" makes tokens of the roles:

  management  everything, ACL tokens and backups (snapshot save) included
  operator    jobs, bundles, pools, nodes and cluster slots: change and read
  read        every read; registration tokens of slots are not shown
  events      the event stream only

A token's secret is shown once, when it is made; the managers keep only its
SHA-256. Refusals exit 7: no or unknown token (revoked, expired), or a role
that does not allow the command (the message names the role needed).`,
	})
	token := &cobra.Command{Use: "token", Short: "Create, list and revoke ACL tokens (a management token)"}
	token.AddCommand(newACLTokenCreateCommand(), newACLTokenListCommand(), newACLTokenRevokeCommand(), newACLTokenSelfCommand())
	cmd.AddCommand(newACLBootstrapCommand(), token)
	return cmd
}

func newACLBootstrapCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "bootstrap",
		Short: "Make the cluster's first management token (once)",
		Long: `Make the cluster's first management token and print its secret, once. Needs
no token. A second bootstrap is refused (exit 4) with the cluster's reset
index N; to bootstrap again (every management token lost), write N into
DATA-DIR/acl-bootstrap-reset on the manager you call, and run this again
against that manager only (--manager-url): the file is removed once used.
Tokens made before stay valid: revoke them with the new token.`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			tok, err := m.AclBootstrap(ctx)
			if err != nil {
				return ctlAbout(err, "acl bootstrap")
			}
			return e.printNewToken(tok)
		}),
	}
}

func newACLTokenCreateCommand() *cobra.Command {
	var name, role string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create --name NAME --role ROLE [--ttl DURATION]",
		Short: "Make a token and print its secret (shown this once)",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			if name == "" || role == "" {
				return ctlUsagef("--name and --role are required")
			}
			if ttl < 0 {
				return ctlUsagef("--ttl %s: must be 0 (never expires) or more", ttl)
			}
			tok, err := m.AclTokenCreate(ctx, name, role, ttl)
			if err != nil {
				return ctlAbout(err, "acl token %s", name)
			}
			return e.printNewToken(tok)
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name (recorded as who made each change)")
	cmd.Flags().StringVar(&role, "role", "", "management, operator, read or events")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (e.g. 720h); 0: never expires")
	return cmd
}

func newACLTokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the tokens (no secrets)",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			resp, err := m.AclTokenList(ctx)
			if err != nil {
				return ctlAbout(err, "acl token list")
			}
			if e.jsonOut {
				return e.printJSON(resp)
			}
			rows := make([][]string, 0, len(resp.GetTokens()))
			for _, t := range resp.GetTokens() {
				rows = append(rows, []string{t.GetAccessorId(), t.GetName(), t.GetRole(), ctlTokenTime(t.GetCreateTime().AsTime()), ctlTokenExpiry(t, e.now())})
			}
			return ctlTable(e.out, []string{"ACCESSOR ID", "NAME", "ROLE", "CREATED", "EXPIRES"}, rows)
		}),
	}
}

func newACLTokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ACCESSOR_ID",
		Short: "Revoke a token: every manager refuses it from then on",
		Args:  ctlArgs("ACCESSOR_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.AclTokenRevoke(ctx, args[0]); err != nil {
				return ctlAbout(err, "acl token %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "revoked acl token %s\n", args[0])
			return err
		}),
	}
}

func newACLTokenSelfCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "self",
		Short: "Show the token this command sends (no secret)",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			t, err := m.AclTokenSelf(ctx)
			if err != nil {
				return ctlAbout(err, "acl token self")
			}
			if e.jsonOut {
				return e.printJSON(t)
			}
			_, err = fmt.Fprintf(e.out, "accessor id  %s\nname         %s\nrole         %s\nexpires      %s\n",
				t.GetAccessorId(), t.GetName(), t.GetRole(), ctlTokenExpiry(t, e.now()))
			return err
		}),
	}
}

// printNewToken prints a token made just now, with its secret.
func (e *ctlEnv) printNewToken(t *managerpb.AclToken) error {
	if e.jsonOut {
		return e.printJSON(t)
	}
	_, err := fmt.Fprintf(e.out, "accessor id  %s\nsecret       %s\nname         %s\nrole         %s\nexpires      %s\n"+
		"The secret is shown only now: keep it (e.g. in a file for --token-file, mode 0600).\n",
		t.GetAccessorId(), t.GetSecretId(), t.GetName(), t.GetRole(), ctlTokenExpiry(t, e.now()))
	return err
}

func ctlTokenTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ctlTokenExpiry is "never", the expiry time, or the time with
// "(expired)".
func ctlTokenExpiry(t *managerpb.AclToken, now time.Time) string {
	if t.GetExpireTime() == nil {
		return "never"
	}
	exp := t.GetExpireTime().AsTime()
	if !now.Before(exp) {
		return ctlTokenTime(exp) + " (expired)"
	}
	return ctlTokenTime(exp)
}
