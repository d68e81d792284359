package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// newTLSCommand is "norsk-manager tls": a small CA for operators without a
// PKI of their own, like `nomad tls` (docs/design/security.md).
func newTLSCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create a certificate authority and certificates for TLS",
		Long: `tls creates the certificates that secure a cluster with TLS, for operators
who have no PKI of their own (as "nomad tls" does): a CA, then certificates it
signs for managers (--server), operators' clients (--client) and workers
(--worker). Keys are ECDSA P-256; every key file is written mode 0600; no
existing file is ever overwritten.

  norsk-manager tls ca create
  norsk-manager tls cert create --server --additional-dnsname m1.example.com
  norsk-manager tls cert create --worker
  norsk-manager tls cert create --client

then run the manager with --tls-cert, --tls-key and --tls-ca, norsk-ctl with
--ca-cert (and --client-cert, --client-key), and each worker with --ca-cert,
--tls-cert and --tls-key (README, "Securing a cluster").`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	ca := &cobra.Command{Use: "ca", Short: "Manage the certificate authority", SilenceUsage: true, SilenceErrors: true}
	ca.AddCommand(newTLSCACreateCommand())
	cert := &cobra.Command{Use: "cert", Short: "Manage certificates", SilenceUsage: true, SilenceErrors: true}
	cert.AddCommand(newTLSCertCreateCommand())
	cmd.AddCommand(ca, cert)
	for _, group := range []*cobra.Command{cmd, ca, cert} {
		group.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("%s: unknown command %q (see --help)", c.CommandPath(), args[0])
			}
			return nil
		}
		group.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	return cmd
}

func noArgs(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("%s: unexpected argument %q: it takes only flags (see --help)", name, args[0])
		}
		return nil
	}
}

func newTLSCACreateCommand() *cobra.Command {
	var domain, dir string
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a new certificate authority",
		Long: `create makes a new self-signed certificate authority (ECDSA P-256) and writes

  DIR/DOMAIN-ca.pem      the CA certificate: give it to every manager (--tls-ca),
                         client (--ca-cert) and worker (--ca-cert)
  DIR/DOMAIN-ca-key.pem  its private key (mode 0600): it signs certificates;
                         keep it off the servers, and secret

It refuses to overwrite either file.`,
		Example:       "  norsk-manager tls ca create\n  norsk-manager tls ca create --domain prod --days 3650 --dir /etc/norsk/tls",
		Args:          noArgs("tls ca create"),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 {
				return usagef("--days %d: must be at least 1", days)
			}
			if err := checkDomain(domain); err != nil {
				return err
			}
			ca, err := pki.CreateCA(pki.CAOptions{Domain: domain, Validity: time.Duration(days) * 24 * time.Hour})
			if err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(dir, domain+"-ca.pem"), filepath.Join(dir, domain+"-ca-key.pem")
			if err := pki.WriteNew(ca.Files(certPath, keyPath)); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "CA certificate written to %s (valid until %s)\n", certPath, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
			fmt.Fprintf(out, "CA key written to %s (mode 0600: keep it secret, it signs certificates)\n", keyPath)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&domain, "domain", pki.DefaultDomain, "domain of the CA: names its files and the role names of its certificates (server.DOMAIN, worker.DOMAIN)")
	f.IntVar(&days, "days", int(pki.DefaultCAValidity/(24*time.Hour)), "days the CA is valid")
	f.StringVar(&dir, "dir", ".", "directory to write the files to (must exist)")
	return cmd
}

// tlsCertFlags are the flags of "tls cert create".
type tlsCertFlags struct {
	server, client, worker bool
	caPath, keyPath        string
	domain, name, dir      string
	days                   int
	dnsNames, ips          []string
}

func newTLSCertCreateCommand() *cobra.Command {
	o := &tlsCertFlags{}
	cmd := &cobra.Command{
		Use:   "create --server|--client|--worker",
		Short: "Create a certificate signed by the CA",
		Long: `create signs a new certificate (ECDSA P-256) with the CA of "tls ca create"
and writes

  DIR/DOMAIN-ROLE[-NAME].pem      the certificate
  DIR/DOMAIN-ROLE[-NAME]-key.pem  its private key (mode 0600)

Exactly one role:

  --server  a manager (--tls-cert/--tls-key of norsk-manager). Clients check
            that the certificate names the host they dial: it holds
            server.DOMAIN, localhost, 127.0.0.1 and ::1; add each manager's
            host names and addresses with --additional-dnsname and
            --additional-ipaddress (or give clients --tls-server-name
            server.DOMAIN). Usable for server and client authentication.
  --client  an operator's client (--client-cert/--client-key of norsk-ctl),
            needed when the manager has --tls-ca. Client authentication only.
  --worker  a worker (--tls-cert/--tls-key of norsk-ctl --mode=worker): it
            serves the stream the manager dials back, and the manager checks
            that it names worker.DOMAIN (not the worker's address, which cloud
            workers do not know in advance). Holds localhost, 127.0.0.1 and
            ::1 too. Server and client authentication (it also registers with
            the manager).

--name tells apart several certificates of one role (one per manager:
--name m1). The certificate's validity is cut to the CA's. Existing files
are never overwritten.`,
		Example: "  norsk-manager tls cert create --server --name m1 --additional-dnsname m1.example.com --additional-ipaddress 10.0.0.1\n" +
			"  norsk-manager tls cert create --worker\n  norsk-manager tls cert create --client --days 30",
		Args:          noArgs("tls cert create"),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTLSCertCreate(cmd.OutOrStdout(), o, cmd.Flags().Changed)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.server, "server", false, "a manager's certificate")
	f.BoolVar(&o.client, "client", false, "an operator client's certificate")
	f.BoolVar(&o.worker, "worker", false, "a worker's certificate")
	f.StringVar(&o.caPath, "ca", "", "the CA certificate (default DOMAIN-ca.pem in --dir)")
	f.StringVar(&o.keyPath, "key", "", "the CA's private key (default DOMAIN-ca-key.pem in --dir)")
	f.StringVar(&o.domain, "domain", pki.DefaultDomain, "domain of the role name the certificate carries (server.DOMAIN, client.DOMAIN, worker.DOMAIN) and of the file names")
	f.StringVar(&o.name, "name", "", "suffix of the file names, to keep several certificates of one role apart (e.g. m1)")
	f.IntVar(&o.days, "days", int(pki.DefaultCertValidity/(24*time.Hour)), "days the certificate is valid")
	f.StringVar(&o.dir, "dir", ".", "directory to write the files to (must exist)")
	f.StringArrayVar(&o.dnsNames, "additional-dnsname", nil, "another DNS name for the certificate's subject alternative names (repeatable or comma-separated)")
	f.StringArrayVar(&o.ips, "additional-ipaddress", nil, "another IP address for the certificate's subject alternative names (repeatable or comma-separated)")
	return cmd
}

func runTLSCertCreate(out io.Writer, o *tlsCertFlags, changed func(string) bool) error {
	var role pki.Role
	n := 0
	for r, set := range map[pki.Role]bool{pki.RoleServer: o.server, pki.RoleClient: o.client, pki.RoleWorker: o.worker} {
		if set {
			role, n = r, n+1
		}
	}
	if n != 1 {
		return usagef("give exactly one of --server, --client, --worker")
	}
	if o.days < 1 {
		return usagef("--days %d: must be at least 1", o.days)
	}
	if err := checkDomain(o.domain); err != nil {
		return err
	}
	if o.name != "" && (strings.ContainsAny(o.name, `/\`) || strings.HasPrefix(o.name, ".")) {
		return usagef("--name %q: a file-name suffix, without '/' and not starting with '.'", o.name)
	}
	opts := pki.CertOptions{Role: role, Domain: o.domain, Validity: time.Duration(o.days) * 24 * time.Hour}
	for _, d := range splitAll(o.dnsNames) {
		if strings.ContainsAny(d, " /:") {
			return usagef("--additional-dnsname %q: not a DNS name (an address goes in --additional-ipaddress)", d)
		}
		opts.DNSNames = append(opts.DNSNames, d)
	}
	for _, s := range splitAll(o.ips) {
		ip := net.ParseIP(s)
		if ip == nil {
			return usagef("--additional-ipaddress %q: not an IP address", s)
		}
		opts.IPAddresses = append(opts.IPAddresses, ip)
	}
	caPath, keyPath := o.caPath, o.keyPath
	if caPath == "" {
		caPath = filepath.Join(o.dir, o.domain+"-ca.pem")
	}
	if keyPath == "" {
		keyPath = filepath.Join(o.dir, o.domain+"-ca-key.pem")
	}
	ca, err := readCA(caPath, keyPath, changed("ca") || changed("key"))
	if err != nil {
		return err
	}
	is, err := ca.Issue(opts)
	if err != nil {
		return err
	}
	base := o.domain + "-" + string(role)
	if o.name != "" {
		base += "-" + o.name
	}
	certOut, keyOut := filepath.Join(o.dir, base+".pem"), filepath.Join(o.dir, base+"-key.pem")
	if err := pki.WriteNew(is.Files(certOut, keyOut)); err != nil {
		return err
	}
	var ips []string
	for _, ip := range is.Cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	fmt.Fprintf(out, "%s certificate written to %s (serial %s, valid until %s)\n", role, certOut, is.Cert.SerialNumber.Text(16), is.Cert.NotAfter.UTC().Format(time.DateOnly))
	fmt.Fprintf(out, "  names: %s\n", strings.Join(append(is.Cert.DNSNames, ips...), ", "))
	fmt.Fprintf(out, "key written to %s (mode 0600)\n", keyOut)
	return nil
}

// readCA reads the CA files; explicit says they were named by --ca/--key
// (else they are the defaults, and the advice is to create them).
func readCA(certPath, keyPath string, explicit bool) (*pki.CA, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		if os.IsNotExist(err) && !explicit {
			return nil, usagef("no CA at %s: create one with \"norsk-manager tls ca create\", or give --ca and --key", certPath)
		}
		return nil, fmt.Errorf("--ca: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s with key %s: %w", certPath, keyPath, err)
	}
	return ca, nil
}

// checkDomain accepts a DNS name for --domain (it goes into role names and
// file names).
func checkDomain(d string) error {
	if d == "" || strings.ContainsAny(d, " /\\:") || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") {
		return usagef("--domain %q: want a DNS domain such as norsk or example.com", d)
	}
	return nil
}

// splitAll splits each value at commas and drops empty entries.
func splitAll(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, splitList(v)...)
	}
	return out
}
