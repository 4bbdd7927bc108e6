package livetest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/pki"
)

// ExternalPostgres starts a PostgreSQL server as an operator's external datastore would
// be one (StartExternalPostgres) for a test: it stops, and its files go, when t ends.
func ExternalPostgres(t testing.TB, postgresBin string) (file string, s externaldb.Server) {
	t.Helper()
	if _, err := user.Lookup("postgres"); err != nil {
		Need(t, "no postgres user: "+err.Error())
	}
	pg, err := StartExternalPostgres(t.TempDir(), postgresBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil || t.Failed() {
			b, _ := os.ReadFile(pg.Log)
			t.Logf("the external PostgreSQL server (stop: %v); its log:\n%s", err, b)
		}
	})
	return pg.File, pg.Server
}

// ExternalPG is a PostgreSQL server started by StartExternalPostgres.
type ExternalPG struct {
	Server externaldb.Server
	File   string // what serve --external-datastore reads (0600)
	Log    string
	dir    string
	cmd    *exec.Cmd
}

// Stop ends the server (a fast shutdown) and removes its data.
func (p *ExternalPG) Stop() error {
	p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown: sessions ended, no wait for clients
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		err = <-done
	}
	return errors.Join(err, os.RemoveAll(p.dir))
}

// StartExternalPostgres starts a PostgreSQL server on 127.0.0.1 over TLS (a CA of its
// own), with scram-sha-256 passwords only and an administrator role, its data in a
// directory the postgres user owns and the administrator's file and the CA under dir
// (root's), and returns once the administrator can connect.
func StartExternalPostgres(dir, postgresBin string) (*ExternalPG, error) {
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	// Not under dir: a test's temporary directory is root's, 0700, and the postgres user
	// must reach its own.
	data, err := os.MkdirTemp("", "external-postgres-")
	if err != nil {
		return nil, err
	}
	p := &ExternalPG{dir: data, Log: filepath.Join(dir, "external-postgres.log")}
	fail := func(err error) (*ExternalPG, error) {
		os.RemoveAll(data)
		return nil, err
	}
	if err := os.Chown(data, uid, gid); err != nil {
		return fail(err)
	}
	write := func(path string, b []byte, owned bool) error {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if owned {
			return os.Chown(path, uid, gid)
		}
		return nil
	}
	ca, err := pki.NewCA("external-postgres-ca")
	if err != nil {
		return fail(err)
	}
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, Server: true})
	if err != nil {
		return fail(err)
	}
	raw, _ := pki.Random(12)
	password := hex.EncodeToString(raw)
	certFile, keyFile, pwfile := filepath.Join(data, "server.crt"), filepath.Join(data, "server.key"), filepath.Join(data, "pw")
	rootCA := filepath.Join(dir, "db-ca.crt") // the operator's copy, root's
	for _, f := range []struct {
		path  string
		b     []byte
		owned bool
	}{{certFile, cert, true}, {keyFile, key, true}, {pwfile, []byte(password + "\n"), true}, {rootCA, ca.CertPEM, false}} {
		if err := write(f.path, f.b, f.owned); err != nil {
			return fail(err)
		}
	}
	asPostgres := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(postgresBin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		c.Dir = data
		return c
	}
	pgdata := filepath.Join(data, "data")
	if out, err := asPostgres("initdb", "-D", pgdata, "-U", "admin", "--pwfile", pwfile, "-A", "scram-sha-256", "--no-sync").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}
	// TLS or nothing over TCP; the socket is for nobody.
	if err := write(filepath.Join(pgdata, "pg_hba.conf"), []byte("hostssl all all 127.0.0.1/32 scram-sha-256\n"), true); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logFile, err := os.Create(p.Log)
	if err != nil {
		return fail(err)
	}
	defer logFile.Close()
	p.cmd = asPostgres("postgres", "-D", pgdata, "-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+data, "-c", "ssl=on", "-c", "ssl_cert_file="+certFile, "-c", "ssl_key_file="+keyFile,
		"-c", "max_connections=200", "-c", "fsync=off")
	p.cmd.Stderr = logFile
	if err := p.cmd.Start(); err != nil {
		return fail(err)
	}
	p.Server = externaldb.Server{Host: "127.0.0.1", Port: port, Admin: "admin", AdminPassword: password, AdminDatabase: "postgres", RootCA: rootCA}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.Server.Check(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the external PostgreSQL server does not accept its administrator: %w", err), p.Stop())
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.File = filepath.Join(dir, "external-datastore")
	dsn := "postgres://admin:" + password + "@" + p.Server.Address() + "/postgres?sslrootcert=" + rootCA + "\n"
	if err := os.WriteFile(p.File, []byte(dsn), 0o600); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return p, nil
}
