package backup

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Datastore is where a cluster's kine table lives: its Postgres, reached over its socket
// as kine's role, whose password libpq and pgx read from kine's passfile (never argv).
type Datastore struct {
	SocketDir string // the directory of Postgres' socket
	Port      int
	User      string
	Database  string
	PassFile  string // libpq's passfile format
	Bin       string // the directory of pg_dump and psql
}

// Table is kine's table: all a cluster's objects and their history.
const Table = "kine"

func (d Datastore) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s passfile=%s",
		quote(d.SocketDir), d.Port, quote(d.User), quote(d.Database), quote(d.PassFile)))
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// quote is a value of libpq's keyword=value connection string.
func quote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Dump is a consistent snapshot of kine's table while the cluster runs and writes: a
// repeatable-read transaction exports its snapshot, pg_dump dumps the table in that very
// snapshot, and the keys live in it are listed in it too, so the manifest lists exactly
// what the dump holds.
func (d Datastore) Dump(ctx context.Context) (sql []byte, keys []string, err error) {
	conn, err := d.connect(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the datastore: %w", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(context.Background())
	var snapshot string
	if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snapshot); err != nil {
		return nil, nil, fmt.Errorf("export a snapshot: %w", err)
	}
	if keys, err = liveKeys(ctx, tx); err != nil {
		return nil, nil, err
	}
	sql, err = d.run(ctx, "pg_dump", nil, "--snapshot="+snapshot, "--table=public."+Table, "--no-owner", "--no-privileges")
	if err != nil {
		return nil, nil, err
	}
	return sql, keys, tx.Commit(ctx)
}

// liveKeys lists each key's newest row, unless it is a deletion, sorted; kine's own rows
// (its compaction mark, gaps) are not the tenant's and have no leading slash.
func liveKeys(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT kv.name FROM `+Table+` kv
		JOIN (SELECT MAX(id) AS id FROM `+Table+` GROUP BY name) newest ON newest.id = kv.id
		WHERE kv.deleted = 0 AND kv.name LIKE '/%' ORDER BY kv.name`)
	if err != nil {
		return nil, fmt.Errorf("list the keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the keys: %w", err)
	}
	return keys, nil
}

// Keys lists every key the datastore holds now: what a restore is checked against.
func (d Datastore) Keys(ctx context.Context) ([]string, error) {
	conn, err := d.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("the datastore: %w", err)
	}
	defer conn.Close(context.Background())
	return liveKeys(ctx, conn)
}

// HasTable says whether kine's table exists: a datastore kine has served.
func (d Datastore) HasTable(ctx context.Context) (bool, error) {
	conn, err := d.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var has bool
	err = conn.QueryRow(ctx, "SELECT to_regclass('public."+Table+"') IS NOT NULL").Scan(&has)
	return has, err
}

// Load runs a dump into the datastore in one transaction, stopping at its first error:
// either all of it is there or none.
func (d Datastore) Load(ctx context.Context, sql []byte) error {
	_, err := d.run(ctx, "psql", sql, "--no-psqlrc", "--quiet", "--single-transaction", "--set=ON_ERROR_STOP=1", "--file=-")
	return err
}

// run runs pg_dump or psql against the datastore, stdin given, and returns its output.
func (d Datastore) run(ctx context.Context, tool string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(d.Bin, tool), append([]string{
		"--host=" + d.SocketDir, fmt.Sprintf("--port=%d", d.Port), "--username=" + d.User, "--dbname=" + d.Database, "--no-password"}, args...)...)
	cmd.Env = []string{"PGPASSFILE=" + d.PassFile, "PGCONNECT_TIMEOUT=10", "LC_ALL=C"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", tool, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// PostgresMajor is the major version of the PostgreSQL whose psql is in bin ("15"), as a
// restore compares it with a backup's.
func PostgresMajor(bin string) (string, error) {
	out, err := exec.Command(filepath.Join(bin, "psql"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", filepath.Join(bin, "psql"), err)
	}
	// "psql (PostgreSQL) 15.10 (Debian 15.10-0+deb12u1)"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return "", fmt.Errorf("psql --version said %q", out)
	}
	major, _, _ := strings.Cut(f[2], ".")
	return major, nil
}
