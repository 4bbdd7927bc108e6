package clusterprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/pki"
	"socialweb.computer/kcp/internal/procgroup"
)

// ErrNoGuardSeam: the identity guard rides the last step before the control plane; a stack
// that puts no step there would make the guard silently not run (invariant 9).
var ErrNoGuardSeam = errors.New("stack has no step before the control plane: the identity guard would not run")

// ErrForeignDatastore: the datastore the control plane would dial belongs to another cluster.
var ErrForeignDatastore = errors.New("datastore belongs to another cluster")

// Identity is who a cluster is: its name and a uid minted with its DataDir. The guard
// writes it into a fresh datastore and compares it on every later start.
type Identity struct {
	Cluster string `json:"cluster"`
	UID     string `json:"uid"`
}

// hasStepBeforeControlPlane reports whether some step precedes the first control-plane step.
func hasStepBeforeControlPlane(steps []procgroup.Step) bool {
	for i, s := range steps {
		if s.Name.IsControlPlane() {
			return i > 0
		}
	}
	return len(steps) > 0
}

// CheckGuardSeam refuses a stack whose control plane has no step before it.
func CheckGuardSeam(steps []procgroup.Step) error {
	if !hasStepBeforeControlPlane(steps) {
		return ErrNoGuardSeam
	}
	return nil
}

// ensureIdentity loads the DataDir's identity, minting it for a new cluster.
func ensureIdentity(s clusterstack.Spec) (Identity, error) {
	path := s.Layout().Identity()
	b, err := os.ReadFile(path)
	if err == nil {
		var id Identity
		if err := json.Unmarshal(b, &id); err != nil {
			return Identity{}, fmt.Errorf("%s: %w", path, err)
		}
		if id.Cluster != s.Name {
			return Identity{}, fmt.Errorf("%s names cluster %q, not %q: %w", path, id.Cluster, s.Name, ErrForeignDatastore)
		}
		return id, nil
	}
	if !os.IsNotExist(err) {
		return Identity{}, err
	}
	raw, err := pki.Random(16)
	if err != nil {
		return Identity{}, err
	}
	id := Identity{Cluster: s.Name, UID: fmt.Sprintf("%x", raw)}
	b, _ = json.Marshal(id)
	return id, atomicfile.WriteFile(path, b, 0o600)
}

// pgConnect dials the cluster's Postgres over its socket. The password comes from a file
// and travels in the connection config, never in a DSN string that might be logged.
func pgConnect(ctx context.Context, s clusterstack.Spec, user, database, password string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host = s.Layout().PostgresSocketDir()
	cfg.Port = 5432
	cfg.User = user
	cfg.Database = database
	cfg.Password = password
	return pgx.ConnectConfig(ctx, cfg)
}

// prepareDatastore makes the kine role and database exist (idempotent), as the superuser.
func prepareDatastore(ctx context.Context, s clusterstack.Spec) error {
	l := s.Layout()
	su, err := os.ReadFile(l.PostgresSuperuserPassword())
	if err != nil {
		return err
	}
	kinePW, err := kinePassword(l.KinePGPass())
	if err != nil {
		return err
	}
	conn, err := pgConnect(ctx, s, clusterstack.PostgresSuperuser, "postgres", strings.TrimSpace(string(su)))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var has bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", clusterstack.KineRole).Scan(&has); err != nil {
		return err
	}
	// The password is sent as a quoted literal inside the session, never on argv or in a log.
	lit := "'" + strings.ReplaceAll(kinePW, "'", "''") + "'"
	role := pgx.Identifier{clusterstack.KineRole}.Sanitize()
	if has {
		_, err = conn.Exec(ctx, "ALTER ROLE "+role+" LOGIN PASSWORD "+lit)
	} else {
		_, err = conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD "+lit)
	}
	if err != nil {
		return fmt.Errorf("kine role: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", clusterstack.KineDatabase).Scan(&has); err != nil {
		return err
	}
	if !has {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{clusterstack.KineDatabase}.Sanitize()+" OWNER "+role); err != nil {
			return fmt.Errorf("kine database: %w", err)
		}
	}
	return nil
}

// kineConnect dials the datastore as kine does: its role, its database, its password;
// on the external server when the cluster's datastore is there.
func kineConnect(ctx context.Context, s clusterstack.Spec, ext *externaldb.Server) (*pgx.Conn, error) {
	if e := s.External; e != nil {
		if ext == nil {
			return nil, errNoExternalDatastore
		}
		pw, err := kinePassword(s.Layout().ExternalPGPass())
		if err != nil {
			return nil, err
		}
		return ext.Connect(ctx, e.Role, pw, e.Database)
	}
	pw, err := kinePassword(s.Layout().KinePGPass())
	if err != nil {
		return nil, err
	}
	return pgConnect(ctx, s, clusterstack.KineRole, clusterstack.KineDatabase, pw)
}

// errNoExternalDatastore: a cluster's datastore is external and this provider has none.
var errNoExternalDatastore = errors.New("the cluster's datastore is external, and this instance has no external datastore (serve --external-datastore)")

// takeExternal takes the cluster's database on the external server over for this
// bring-up (externaldb.Server.Take, the fence) and writes what kine dials it with: the
// new password, and the CA that verifies the server, both readable by kine's user only.
func takeExternal(ctx context.Context, s clusterstack.Spec, ext *externaldb.Server, sweeper *externaldb.Sweeper, as runAs) error {
	if ext == nil {
		return errNoExternalDatastore
	}
	l := s.Layout()
	ca, err := os.ReadFile(ext.RootCA)
	if err != nil {
		return fmt.Errorf("external datastore: its CA: %w", err)
	}
	tenant := externaldb.Tenant{Database: s.External.Database, Role: s.External.Role}
	pw, fenced, err := ext.Take(ctx, tenant, s.External.Epoch)
	if err != nil {
		return err
	}
	// A login of the fenced holder that began just before the take may still complete:
	// ended as it registers, for the server's authentication_timeout.
	if sweeper != nil {
		sweeper.Add(tenant, fenced)
	}
	if err := atomicfile.WriteFile(l.ExternalCA(), ca, 0o600); err != nil {
		return err
	}
	// libpq passfile: host:port:database:user:password; the server is kine's only one.
	line := fmt.Sprintf("*:*:%s:%s:%s\n", s.External.Database, s.External.Role, pw)
	if err := atomicfile.WriteFile(l.ExternalPGPass(), []byte(line), 0o600); err != nil {
		return err
	}
	return as.own(s)
}

// kinePassword reads the password field of kine's passfile.
func kinePassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	f := strings.Split(strings.TrimSpace(string(b)), ":")
	if len(f) != 5 {
		return "", fmt.Errorf("%s: not a one-line passfile", path)
	}
	return f[4], nil
}

// guardIdentity is the identity guard (invariant 9): through the very DSN kine dials, it
// writes this cluster's identity into a fresh datastore, and refuses one holding another's.
func guardIdentity(ctx context.Context, s clusterstack.Spec, ext *externaldb.Server, id Identity) error {
	conn, err := kineConnect(ctx, s, ext)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS socialweb_identity (
		only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
		cluster text NOT NULL,
		uid text NOT NULL)`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO socialweb_identity (cluster, uid) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id.Cluster, id.UID); err != nil {
		return err
	}
	var got Identity
	if err := conn.QueryRow(ctx, `SELECT cluster, uid FROM socialweb_identity`).Scan(&got.Cluster, &got.UID); err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("%w: it holds %s (uid %s), this is %s (uid %s)", ErrForeignDatastore, got.Cluster, got.UID, id.Cluster, id.UID)
	}
	return nil
}

// guardFileIdentity is the guard for a datastore that is a file in the DataDir (the front's
// SQLite): the identity is kept beside the database, written with a fresh one and compared
// on every later start, so a database copied in from another cluster is refused.
func guardFileIdentity(s clusterstack.Spec, want Identity) error {
	l := s.Layout()
	if err := os.MkdirAll(l.FrontDBDir(), 0o700); err != nil {
		return err
	}
	path := l.FrontDBIdentity()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		if exists(l.FrontDB()) {
			return fmt.Errorf("%s exists without %s: %w", l.FrontDB(), path, ErrForeignDatastore)
		}
		b, _ = json.Marshal(want)
		return atomicfile.WriteFile(path, b, 0o600)
	}
	if err != nil {
		return err
	}
	var got Identity
	if err := json.Unmarshal(b, &got); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if got != want {
		return fmt.Errorf("%s is cluster %s/%s, this DataDir is %s/%s: %w", path, got.Cluster, got.UID, want.Cluster, want.UID, ErrForeignDatastore)
	}
	return nil
}
