package livetest

import (
	"context"
	"encoding/hex"
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
// be one: on 127.0.0.1 over TLS (a CA of the test's), scram-sha-256 passwords only, an
// administrator role. It returns the file serve --external-datastore reads (0600) and the
// server; the server stops, and its files go, when t ends.
func ExternalPostgres(t testing.TB, postgresBin string) (file string, s externaldb.Server) {
	t.Helper()
	pg, err := user.Lookup("postgres")
	if err != nil {
		Need(t, "no postgres user: "+err.Error())
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	dir, err := os.MkdirTemp("", "external-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	own := func(path string) {
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	own(dir)
	write := func(name string, b []byte, owned bool) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if owned {
			own(path)
		}
		return path
	}
	ca, err := pki.NewCA("external-postgres-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := write("server.crt", cert, true), write("server.key", key, true)
	rootCA := filepath.Join(t.TempDir(), "db-ca.crt") // the operator's copy, root's
	if err := os.WriteFile(rootCA, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, _ := pki.Random(12)
	password := hex.EncodeToString(raw)
	pwfile := write("pw", []byte(password+"\n"), true)
	data := filepath.Join(dir, "data")
	asPostgres := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(postgresBin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		c.Dir = dir
		return c
	}
	if out, err := asPostgres("initdb", "-D", data, "-U", "admin", "--pwfile", pwfile, "-A", "scram-sha-256", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// TLS or nothing over TCP; the socket is for nobody.
	write("data/pg_hba.conf", []byte("hostssl all all 127.0.0.1/32 scram-sha-256\n"), true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := asPostgres("postgres", "-D", data, "-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir, "-c", "ssl=on", "-c", "ssl_cert_file="+certFile, "-c", "ssl_key_file="+keyFile,
		"-c", "max_connections=200", "-c", "fsync=off")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "external-postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = logFile
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("the external PostgreSQL server's log:\n%s", b)
		}
	})
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT) // fast shutdown: sessions ended, no wait for clients
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			srv.Process.Kill()
			<-done
		}
	})
	s = externaldb.Server{Host: "127.0.0.1", Port: port, Admin: "admin", AdminPassword: password, AdminDatabase: "postgres", RootCA: rootCA}
	Eventually(t, time.Minute, "the external PostgreSQL server accepts its administrator", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.Check(ctx)
		return err == nil, errString(err)
	})
	file = filepath.Join(t.TempDir(), "external-datastore")
	dsn := "postgres://admin:" + password + "@" + s.Address() + "/postgres?sslrootcert=" + rootCA + "\n"
	if err := os.WriteFile(file, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, s
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
