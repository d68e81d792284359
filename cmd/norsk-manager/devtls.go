package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// devTLS is the throw-away TLS material of --dev --dev-tls: a CA made at
// start and a server, worker and client certificate in a temporary
// directory removed on exit.
type devTLS struct {
	dir            string
	clientFiles    client.TLSFiles
	worker         *pki.Reloader
	managerTLS     agent.TLSConfig
	clientTLS      *tls.Config
	workerServer   *tls.Config
	workerRegister *tls.Config
}

// newDevTLS makes the CA and certificates in dir (which must exist and be
// empty) and loads them.
func newDevTLS(log *slog.Logger, dir string) (*devTLS, error) {
	ca, err := pki.CreateCA(pki.CAOptions{})
	if err != nil {
		return nil, err
	}
	d := &devTLS{dir: dir}
	caPath := filepath.Join(dir, "norsk-ca.pem")
	files := []pki.File{{Path: caPath, Data: ca.CertPEM, Mode: pki.CertFileMode}}
	paths := map[pki.Role]pki.Files{}
	for _, role := range pki.Roles {
		is, err := ca.Issue(pki.CertOptions{Role: role})
		if err != nil {
			return nil, err
		}
		f := pki.Files{Cert: filepath.Join(dir, "norsk-"+string(role)+".pem"), Key: filepath.Join(dir, "norsk-"+string(role)+"-key.pem"), CA: caPath}
		files = append(files, is.Files(f.Cert, f.Key)...)
		paths[role] = f
	}
	if err := pki.WriteNew(files); err != nil {
		return nil, err
	}
	server, err := pki.NewReloader(pki.ReloaderConfig{Files: paths[pki.RoleServer], Name: "api", Logger: log.With("component", "tls")})
	if err != nil {
		return nil, err
	}
	d.managerTLS = agent.TLSConfig{Certs: server}
	if d.worker, err = pki.NewReloader(pki.ReloaderConfig{Files: paths[pki.RoleWorker], Name: "dev-worker", Logger: log.With("component", "tls")}); err != nil {
		return nil, err
	}
	d.workerServer, d.workerRegister = d.worker.ServerConfig(true), d.worker.ClientConfig()
	c := paths[pki.RoleClient]
	d.clientFiles = client.TLSFiles{CACert: caPath, ClientCert: c.Cert, ClientKey: c.Key}
	if d.clientTLS, err = d.clientFiles.Config(); err != nil {
		return nil, err
	}
	return d, nil
}

// ctlFlags are the norsk-ctl flags of the dev client certificate.
func (d *devTLS) ctlFlags() string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf(" --ca-cert %s --client-cert %s --client-key %s", d.clientFiles.CACert, d.clientFiles.ClientCert, d.clientFiles.ClientKey)
}
