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
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
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
	defer c.Close(context.Background())
	// What Take and Drop need: roles and databases made, and other sessions ended (the
	// fence), which only a superuser or a member of pg_signal_backend may do.
	var may bool
	err = c.QueryRow(ctx, `SELECT rolsuper OR (rolcreaterole AND rolcreatedb AND pg_has_role(current_user, 'pg_signal_backend', 'MEMBER'))
		FROM pg_roles WHERE rolname = current_user`).Scan(&may)
	if err != nil {
		return fmt.Errorf("external datastore %s: %w", s.Address(), err)
	}
	if !may {
		return fmt.Errorf("external datastore %s: role %s may not make tenants or fence them: ALTER ROLE %s CREATEROLE CREATEDB; GRANT pg_signal_backend TO %s", s.Address(), s.Admin, s.Admin, s.Admin)
	}
	if _, err := c.Exec(ctx, fenceTable); err != nil {
		return fmt.Errorf("external datastore %s: the fence's table in database %s: %w (role %s needs CREATE there, or to own it)", s.Address(), s.AdminDatabase, err, s.Admin)
	}
	return nil
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

// ErrFenced: the datastore was taken over at a later epoch, by the instance a Cluster is
// bound to now (or dropped): this bring-up must not touch it.
var ErrFenced = errors.New("the datastore was taken over by a later bring-up")

// Take makes t's role and database exist (the role owning the database, nobody else
// allowed to connect to it), and takes them over for a bring-up of epoch (the Cluster's
// binding epoch: every rebind to another instance raises it): a new password for the role,
// and every session of the role ended (the fence; see the package comment). A take of an
// epoch older than one already taken is refused (ErrFenced): an instance that lost the
// Cluster, restarting its processes, cannot take the datastore back. It returns the new
// password, for the caller to write where kine reads it, and when the fence began.
func (s Server) Take(ctx context.Context, t Tenant, epoch int64) (string, time.Time, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	password := hex.EncodeToString(raw)
	verifier, err := scramVerifier(password)
	if err != nil {
		return "", time.Time{}, err
	}
	c, err := s.admin(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	defer c.Close(context.Background())
	fail := func(what string, err error) (string, time.Time, error) {
		return "", time.Time{}, fmt.Errorf("external datastore %s: %s %s: %w", s.Address(), what, t.Role, err)
	}
	role, db := pgx.Identifier{t.Role}.Sanitize(), pgx.Identifier{t.Database}.Sanitize()
	tx, err := c.Begin(ctx)
	if err != nil {
		return fail("take", err)
	}
	defer tx.Rollback(context.Background())
	// The epoch first: its row lock orders two takes of one tenant, and the older loses.
	var now int64
	err = tx.QueryRow(ctx, `INSERT INTO socialweb_fence (role, epoch) VALUES ($1, $2)
		ON CONFLICT (role) DO UPDATE SET epoch = EXCLUDED.epoch WHERE socialweb_fence.epoch <= EXCLUDED.epoch
		RETURNING epoch`, t.Role, epoch).Scan(&now)
	if errors.Is(err, pgx.ErrNoRows) {
		var held int64
		tx.QueryRow(ctx, "SELECT epoch FROM socialweb_fence WHERE role = $1", t.Role).Scan(&held)
		return fail("take", fmt.Errorf("%w (epoch %d here, %d taken)", ErrFenced, epoch, held))
	}
	if err != nil {
		return fail("take", err)
	}
	var has bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", t.Role).Scan(&has); err != nil {
		return fail("role", err)
	}
	// The password goes as a SCRAM verifier computed here: the password itself is in no
	// statement the server could log (log_statement=ddl), and on no argv.
	lit := "'" + strings.ReplaceAll(verifier, "'", "''") + "'"
	if has {
		_, err = tx.Exec(ctx, "ALTER ROLE "+role+" LOGIN PASSWORD "+lit)
	} else {
		// Least privilege: it logs in and owns its one database, nothing more.
		_, err = tx.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD "+lit)
	}
	if err != nil {
		return fail("role", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("take", err)
	}
	// After the commit: a login that read the old verifier began before this, and is
	// ended by what follows; one that begins after reads the new one.
	var fenced time.Time
	if err := c.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&fenced); err != nil {
		return fail("take", err)
	}
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", t.Database).Scan(&has); err != nil {
		return fail("database of", err)
	}
	if !has {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+role); err != nil {
			return fail("database of", err)
		}
		if _, err := c.Exec(ctx, "REVOKE ALL ON DATABASE "+db+" FROM PUBLIC"); err != nil {
			return fail("database of", err)
		}
	}
	if err := s.endSessions(ctx, c, t, fenced); err != nil {
		return "", time.Time{}, err
	}
	return password, fenced, nil
}

// fenceTable holds, in the administrator's database, the epoch each tenant was last
// taken at. Check makes it (once per look, before any take of this server's instance),
// not Take: an administrator without CREATE there is told so by Check, and takes at once
// on a fresh server do not race to make it.
const fenceTable = `CREATE TABLE IF NOT EXISTS socialweb_fence (role text PRIMARY KEY, epoch bigint NOT NULL)`

// endSessions ends every client session of t's role (or on its database) that began
// before fenced, and looks again until none has been seen for a moment. Sessions that
// began after are the new holder's.
func (s Server) endSessions(ctx context.Context, c *pgx.Conn, t Tenant, fenced time.Time) error {
	const quiet = 300 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for calm := 0; calm < 2; {
		ended, err := s.endOnce(ctx, c, t, fenced)
		if err != nil {
			return err
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

func (s Server) endOnce(ctx context.Context, c *pgx.Conn, t Tenant, fenced time.Time) (int, error) {
	var ended int
	err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND (usename = $1 OR datname = $2)
		AND backend_start < $3 AND pid <> pg_backend_pid()`, t.Role, t.Database, fenced).Scan(&ended)
	if err != nil {
		return 0, fmt.Errorf("external datastore %s: end the sessions of %s: %w", s.Address(), t.Role, err)
	}
	return ended, nil
}

// scramVerifier is PostgreSQL's SCRAM-SHA-256 verifier of password (RFC 5802, 7677;
// 4096 iterations, as PostgreSQL makes them): what the server stores, from which the
// password cannot be had.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	const iterations = 4096
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key"))), nil
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
	// The fence closes for good: a restart of a cluster that is gone, however late, cannot
	// make its database again.
	if _, err := c.Exec(ctx, `INSERT INTO socialweb_fence (role, epoch) VALUES ($1, $2)
		ON CONFLICT (role) DO UPDATE SET epoch = EXCLUDED.epoch`, t.Role, int64(math.MaxInt64)); err != nil {
		return fmt.Errorf("external datastore %s: close the fence of %s: %w", s.Address(), t.Role, err)
	}
	if err := s.endSessions(ctx, c, t, time.Now().Add(time.Hour)); err != nil {
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
