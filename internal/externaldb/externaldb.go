// Package externaldb is the external datastore flavour: one PostgreSQL server, named once
// per serve, that holds a database and a role per tenant cluster, so that the cluster's data
// outlives its host and another instance can bring it up. The provider connects as an
// administrator to make, hand over and drop a tenant's database; the tenant's kine dials
// it as the tenant's own role, over TLS that verifies the server, with a password that is
// never on argv.
//
// Fencing: every bring-up of a cluster takes its datastore over (Take): the tenant role's
// password is replaced by a new one and every session of the role is ended. A kine started
// before, by an instance that has since lost the cluster, holds the old password: it can
// neither keep its sessions nor open new ones, so it can never write to a datastore now
// owned by another instance. The password is the epoch.
package externaldb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is the external PostgreSQL server and how the provider reaches it as its
// administrator.
type Server struct {
	Host string
	Port int
	// Admin and AdminPassword are a role that may create roles and databases
	// (CREATEROLE CREATEDB, or a superuser); AdminDatabase is where it connects.
	Admin, AdminPassword, AdminDatabase string
	// RootCA is the file of the CA that signed the server's certificate: every connection
	// verifies the server against it and its host name (sslmode=verify-full).
	RootCA string
}

// Load reads the server from file: one line, a URL such as
// postgres://admin:PASSWORD@db.example:5432/postgres?sslrootcert=/etc/socialweb/db-ca.crt.
// The file holds a password: it must be the owner's alone (0600). TLS that verifies the
// server is required: sslrootcert must name a readable CA file, and any sslmode other than
// verify-full is refused.
func Load(file string) (Server, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return Server{}, fmt.Errorf("--external-datastore %s: %w", file, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Server{}, fmt.Errorf("--external-datastore %s: mode %04o lets others read the administrator's password; chmod 600 it", file, fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return Server{}, fmt.Errorf("--external-datastore %s: %w", file, err)
	}
	s, err := Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return Server{}, fmt.Errorf("--external-datastore %s: %w", file, err)
	}
	if _, err := os.ReadFile(s.RootCA); err != nil {
		return Server{}, fmt.Errorf("--external-datastore %s: sslrootcert: %w", file, err)
	}
	return s, nil
}

// Parse reads a server URL (Load's format); its errors name the part that is wrong and
// never repeat the password.
func Parse(raw string) (Server, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return Server{}, errors.New("want one line, a URL postgres://ADMIN:PASSWORD@HOST:PORT/DATABASE?sslrootcert=CA-FILE")
	}
	s := Server{Host: u.Hostname(), Port: 5432, Admin: u.User.Username(), AdminDatabase: strings.TrimPrefix(u.Path, "/")}
	s.AdminPassword, _ = u.User.Password()
	if p := u.Port(); p != "" {
		if s.Port, err = strconv.Atoi(p); err != nil || s.Port < 1 || s.Port > 65535 {
			return Server{}, fmt.Errorf("port %q: want 1-65535", p)
		}
	}
	q := u.Query()
	s.RootCA = q.Get("sslrootcert")
	switch {
	case s.Host == "":
		return Server{}, errors.New("no host: want postgres://ADMIN:PASSWORD@HOST:PORT/DATABASE?sslrootcert=CA-FILE")
	case s.Admin == "":
		return Server{}, errors.New("no administrator role before the @")
	case s.AdminPassword == "":
		return Server{}, errors.New("no password for the administrator (ADMIN:PASSWORD@)")
	case s.RootCA == "":
		return Server{}, errors.New("no sslrootcert: the server is verified against a CA file, always")
	case q.Get("sslmode") != "" && q.Get("sslmode") != "verify-full":
		return Server{}, fmt.Errorf("sslmode=%s: only verify-full is accepted (leave it out)", q.Get("sslmode"))
	}
	if s.AdminDatabase == "" {
		s.AdminDatabase = "postgres"
	}
	return s, nil
}

// Address is host:port.
func (s Server) Address() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// config is a connection to the server as user, with TLS verifying it.
func (s Server) config(user, password, database string) (*pgx.ConnConfig, error) {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {s.RootCA}, "connect_timeout": {"10"}}
	cfg, err := pgx.ParseConfig("postgres://" + s.Address() + "/?" + q.Encode())
	if err != nil {
		return nil, err
	}
	// The password travels in the config, never in a DSN string that might be logged.
	cfg.User, cfg.Password, cfg.Database = user, password, database
	return cfg, nil
}

// Connect dials the server as user.
func (s Server) Connect(ctx context.Context, user, password, database string) (*pgx.Conn, error) {
	cfg, err := s.config(user, password, database)
	if err != nil {
		return nil, err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("external datastore %s as %s: %w", s.Address(), user, err)
	}
	return c, nil
}

func (s Server) admin(ctx context.Context) (*pgx.Conn, error) {
	return s.Connect(ctx, s.Admin, s.AdminPassword, s.AdminDatabase)
}

// Check connects as the administrator: what serve says at its start of a server it cannot
// use.
func (s Server) Check(ctx context.Context) error {
	c, err := s.admin(ctx)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// Tenant is one cluster's database and role on the server: both named by the cluster's
// uid on the front, which every instance reads alike and no other cluster has.
type Tenant struct{ Database, Role string }

// TenantOf is the database and role of the Cluster whose front uid is uid.
func TenantOf(uid string) (Tenant, error) {
	h := strings.ReplaceAll(strings.ToLower(uid), "-", "")
	if len(h) < 8 || strings.Trim(h, "0123456789abcdef") != "" {
		return Tenant{}, fmt.Errorf("cluster uid %q: want the front's uid", uid)
	}
	n := "kine_" + h
	return Tenant{Database: n, Role: n}, nil
}

// Take makes t's role and database exist (the role owning the database, nobody else
// allowed to connect to it), and takes them over for a bring-up: a new password for the
// role, and every session of the role ended (the fence; see the package comment). It
// returns the new password, for the caller to write where kine reads it.
func (s Server) Take(ctx context.Context, t Tenant) (string, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	password := hex.EncodeToString(raw)
	c, err := s.admin(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	role, db := pgx.Identifier{t.Role}.Sanitize(), pgx.Identifier{t.Database}.Sanitize()
	// A quoted literal inside the session: the password is on no argv and in no log.
	lit := "'" + strings.ReplaceAll(password, "'", "''") + "'"
	var has bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", t.Role).Scan(&has); err != nil {
		return "", fmt.Errorf("external datastore %s: %w", s.Address(), err)
	}
	if has {
		_, err = c.Exec(ctx, "ALTER ROLE "+role+" LOGIN PASSWORD "+lit)
	} else {
		// Least privilege: it logs in and owns its one database, nothing more.
		_, err = c.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD "+lit)
	}
	if err != nil {
		return "", fmt.Errorf("external datastore %s: role %s: %w", s.Address(), t.Role, err)
	}
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", t.Database).Scan(&has); err != nil {
		return "", fmt.Errorf("external datastore %s: %w", s.Address(), err)
	}
	if !has {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+role); err != nil {
			return "", fmt.Errorf("external datastore %s: database %s: %w", s.Address(), t.Database, err)
		}
		if _, err := c.Exec(ctx, "REVOKE ALL ON DATABASE "+db+" FROM PUBLIC"); err != nil {
			return "", fmt.Errorf("external datastore %s: database %s: %w", s.Address(), t.Database, err)
		}
	}
	if err := s.endSessions(ctx, c, t); err != nil {
		return "", err
	}
	return password, nil
}

// endSessions ends every session of t's role, and looks again until none has been seen
// for a moment: a session that authenticated with the old password just before it was
// replaced registers a little after, and is ended too.
func (s Server) endSessions(ctx context.Context, c *pgx.Conn, t Tenant) error {
	const quiet = 300 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for calm := 0; calm < 2; {
		var ended int
		err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE (usename = $1 OR datname = $2) AND pid <> pg_backend_pid()`, t.Role, t.Database).Scan(&ended)
		if err != nil {
			return fmt.Errorf("external datastore %s: end the sessions of %s: %w", s.Address(), t.Role, err)
		}
		if ended == 0 {
			calm++
		} else {
			calm = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("external datastore %s: sessions of %s keep coming back", s.Address(), t.Role)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(quiet):
		}
	}
	return nil
}

// Drop removes t's database and role: the teardown of a deleted cluster, its data with it.
// What is already gone is done.
func (s Server) Drop(ctx context.Context, t Tenant) error {
	c, err := s.admin(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "ALTER ROLE "+pgx.Identifier{t.Role}.Sanitize()+" NOLOGIN"); err != nil && !isMissing(err) {
		return fmt.Errorf("external datastore %s: role %s: %w", s.Address(), t.Role, err)
	}
	if err := s.endSessions(ctx, c, t); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{t.Database}.Sanitize()); err != nil {
		return fmt.Errorf("external datastore %s: drop database %s: %w", s.Address(), t.Database, err)
	}
	if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{t.Role}.Sanitize()); err != nil {
		return fmt.Errorf("external datastore %s: drop role %s: %w", s.Address(), t.Role, err)
	}
	return nil
}

// Exists says whether t's database is on the server.
func (s Server) Exists(ctx context.Context, t Tenant) (bool, error) {
	c, err := s.admin(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close(context.Background())
	var has bool
	err = c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", t.Database).Scan(&has)
	return has, err
}

func isMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "does not exist")
}
