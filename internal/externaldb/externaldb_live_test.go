package externaldb_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/livetest"
)

// Against a real PostgreSQL server over TLS: Take makes a tenant's role and database, and
// each Take fences the one before (its session ended, its password refused) while the
// data stays, and a take of an older epoch is refused; one tenant's role cannot open another's database; bad credentials and an
// unreachable server are errors that say so; Drop removes all of it, twice over.
func TestTakeFencesTheHolderBefore(t *testing.T) {
	livetest.Start(t)
	_, s := livetest.ExternalPostgres(t, clusterstack.DefaultPostgresBin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t1, _ := externaldb.TenantOf("11111111-2222-3333-4444-555555555555")
	t2, _ := externaldb.TenantOf("66666666-7777-8888-9999-000000000000")

	pw1, _, err := s.Take(ctx, t1, 1)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Connect(ctx, t1.Role, pw1, t1.Database)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the fence')"); err != nil {
		t.Fatal(err)
	}

	pw2, _, err := s.Take(ctx, t1, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The holder of epoch 1, restarting, cannot take it back.
	if _, _, err := s.Take(ctx, t1, 1); !errors.Is(err, externaldb.ErrFenced) {
		t.Errorf("a take of an older epoch: %v; want ErrFenced", err)
	}
	if pw2 == pw1 {
		t.Fatal("the second Take kept the password")
	}
	if _, err := old.Exec(ctx, "INSERT INTO kept VALUES ('from the fenced holder')"); err == nil {
		t.Error("the session opened before the second Take could still write")
	}
	if c, err := s.Connect(ctx, t1.Role, pw1, t1.Database); err == nil {
		c.Close(ctx)
		t.Error("the password of the first Take still opens a session")
	} else if !authFailed(err) {
		t.Errorf("the old password: %v; want an authentication failure", err)
	}
	now, err := s.Connect(ctx, t1.Role, pw2, t1.Database)
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := now.QueryRow(ctx, "SELECT string_agg(v, ',') FROM kept").Scan(&v); err != nil || v != "before the fence" {
		t.Errorf("after the fence: %q, %v; want only what was written before it", v, err)
	}
	now.Close(ctx)

	pwOther, _, err := s.Take(ctx, t2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Connect(ctx, t2.Role, pwOther, t1.Database); err == nil {
		c.Close(ctx)
		t.Error("another tenant's role opened this tenant's database")
	}

	bad := s
	bad.AdminPassword = "wrong"
	if err := bad.Check(ctx); !authFailed(err) || !strings.Contains(err.Error(), s.Address()) {
		t.Errorf("a wrong administrator password: %v; want an authentication failure naming the server", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	gone := s
	gone.Port = closed
	if err := gone.Check(ctx); err == nil || !strings.Contains(err.Error(), gone.Address()) {
		t.Errorf("an unreachable server: %v; want an error naming it", err)
	}
	if _, _, err := gone.Take(ctx, t1, 3); err == nil {
		t.Error("Take on an unreachable server succeeded")
	}

	for range 2 {
		if err := s.Drop(ctx, t1); err != nil {
			t.Fatal(err)
		}
	}
	if has, err := s.Exists(ctx, t1); err != nil || has {
		t.Errorf("after Drop: exists %v, %v", has, err)
	}
	if _, _, err := s.Take(ctx, t1, 99); !errors.Is(err, externaldb.ErrFenced) {
		t.Errorf("a take after Drop: %v; want ErrFenced (a late restart must not make the database again)", err)
	}
	if has, _ := s.Exists(ctx, t1); has {
		t.Error("a take after Drop made the database again")
	}
	if c, err := s.Connect(ctx, t1.Role, pw2, "postgres"); err == nil {
		c.Close(ctx)
		t.Error("the dropped role still logs in")
	}
	s.Drop(ctx, t2)
}

func authFailed(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "28P01" || err != nil && strings.Contains(err.Error(), "password authentication failed")
}
