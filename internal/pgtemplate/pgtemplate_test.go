package pgtemplate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestKeyIgnoresThePathsOfARun(t *testing.T) {
	a := Key([]string{"/pg/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=C"})
	b := Key([]string{"/pg/bin/initdb", "--pgdata=/b", "--pwfile=/b.pw", "--locale=C"})
	if a != b {
		t.Fatalf("keys of one setting differ: %s, %s", a, b)
	}
	for _, other := range [][]string{
		{"/pg/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=en_US"},
		{"/pg16/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=C"},
	} {
		if Key(other) == a {
			t.Errorf("%v has the key of another setting", other)
		}
	}
}

// fakeInitdb makes what a data directory holds, as far as a copy can tell.
func fakeInitdb(calls *int) func(context.Context, string) error {
	return func(_ context.Context, dir string) error {
		*calls++
		if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(dir, "base"), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "base", "1"), []byte("catalog"), 0o600)
	}
}

func TestATemplateIsMadeOnceAndCopiedWhole(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "templates", "postgres-k")
	uid, gid := os.Getuid(), os.Getgid()
	calls := 0
	for range 2 {
		if err := Ensure(context.Background(), dir, uid, gid, fakeInitdb(&calls)); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("initdb ran %d times for one template", calls)
	}
	dst := filepath.Join(root, "cluster", "data")
	os.MkdirAll(filepath.Dir(dst), 0o700)
	if err := Copy(dir, dst, uid, gid); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "base", "1"))
	if err != nil || string(b) != "catalog" {
		t.Fatalf("copied file: %q, %v", b, err)
	}
	for _, p := range []string{dst, filepath.Join(dst, "base"), filepath.Join(dst, "PG_VERSION")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
			t.Errorf("%s: owner %d, want %d", p, st.Uid, uid)
		}
	}
	if err := Copy(dir, dst, uid, gid); err == nil {
		t.Fatal("a copy over an existing data directory was allowed")
	}
}

func TestAFailedInitdbLeavesNoTemplate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "postgres-k")
	failed := errors.New("initdb: out of disk")
	err := Ensure(context.Background(), dir, os.Getuid(), os.Getgid(), func(_ context.Context, d string) error {
		os.WriteFile(filepath.Join(d, "PG_VERSION"), []byte("15\n"), 0o600) // half made
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Ensure = %v, want the initdb error", err)
	}
	for _, p := range []string{dir, dir + ".new"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after a failed initdb", p)
		}
	}
	calls := 0
	if err := Ensure(context.Background(), dir, os.Getuid(), os.Getgid(), fakeInitdb(&calls)); err != nil || calls != 1 {
		t.Fatalf("the next Ensure: %v, %d initdb runs", err, calls)
	}
}
