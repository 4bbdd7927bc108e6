package pgtemplate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func TestKeyIgnoresThePathsOfARun(t *testing.T) {
	a := Key([]string{"/pg/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=C"}, "pin1")
	b := Key([]string{"/pg/bin/initdb", "--pgdata=/b", "--pwfile=/b.pw", "--locale=C"}, "pin1")
	if a != b {
		t.Fatalf("keys of one setting differ: %s, %s", a, b)
	}
	for _, other := range []string{
		Key([]string{"/pg/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=en_US"}, "pin1"),
		Key([]string{"/pg16/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=C"}, "pin1"),
		Key([]string{"/pg/bin/initdb", "--pgdata=/a", "--pwfile=/a.pw", "--locale=C"}, "pin2"), // another binary at the path
	} {
		if other == a {
			t.Error("another setting has the same key")
		}
	}
}

// fakeInitdb makes what a data directory holds, as far as a copy can tell, with modes
// wider than initdb's (as initdb's user could have made them): a copy never carries them.
func fakeInitdb(calls *atomic.Int32) func(context.Context, string) error {
	return func(_ context.Context, dir string) error {
		calls.Add(1)
		if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(dir, "base"), 0o700); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(dir, "base"), 0o777); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "base", "1"), []byte("catalog"), 0o600); err != nil {
			return err
		}
		return os.Chmod(filepath.Join(dir, "base", "1"), 0o666)
	}
}

func owner(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// nobody is the user a copy is handed to: not the test's own, so a missing chown shows.
const nobody = 65534

func TestATemplateIsMadeOnceRootsAndCopiedWhole(t *testing.T) {
	root := t.TempDir()
	templates := filepath.Join(root, "templates")
	var calls atomic.Int32
	var wg sync.WaitGroup
	dirs := make([]string, 3)
	for i := range dirs {
		wg.Go(func() {
			d, err := Ensure(context.Background(), templates, "k", nobody, nobody, fakeInitdb(&calls))
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		})
	}
	wg.Wait()
	if calls.Load() != 1 || dirs[0] != dirs[1] || dirs[1] != dirs[2] {
		t.Fatalf("three Ensures at once: %d initdb runs, dirs %v", calls.Load(), dirs)
	}
	dir := dirs[0]
	for _, p := range []string{dir, filepath.Join(dir, "base", "1")} {
		if owner(t, p) != 0 {
			t.Errorf("template %s is uid %d's, want root's", p, owner(t, p))
		}
	}

	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dst := filepath.Join(root, "staging")
	if err := Copy(dir, dst, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if owner(t, dst) != 0 {
		t.Error("a copy's top is handed over before it is whole")
	}
	if err := Own(dst, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "base", "1"))
	if err != nil || string(b) != "catalog" {
		t.Fatalf("copied file: %q, %v", b, err)
	}
	for p, want := range map[string]os.FileMode{dst: 0o700, filepath.Join(dst, "base"): 0o700, filepath.Join(dst, "base", "1"): 0o600, filepath.Join(dst, "PG_VERSION"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		if owner(t, p) != nobody {
			t.Errorf("%s: owner %d, want %d", p, owner(t, p), nobody)
		}
	}
	if err := Copy(dir, dst, nobody, nobody); err == nil {
		t.Fatal("a copy over an existing data directory was allowed")
	}
}

func TestALinkInATemplateIsRefusedAndTheCopyRemoved(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "template")
	os.Mkdir(src, 0o700)
	os.WriteFile(filepath.Join(src, "PG_VERSION"), []byte("15\n"), 0o600)
	if err := os.Symlink("/etc/shadow", filepath.Join(src, "pg_hba.conf")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "staging")
	if err := Copy(src, dst, nobody, nobody); err == nil {
		t.Fatal("a template holding a link was copied")
	}
	if _, err := os.Lstat(dst); err == nil {
		t.Error("a failed copy is left")
	}
}

func TestAFailedInitdbLeavesNoTemplateAndANewKeyReplacesTheOld(t *testing.T) {
	templates := filepath.Join(t.TempDir(), "templates")
	failed := errors.New("initdb: out of disk")
	_, err := Ensure(context.Background(), templates, "k1", nobody, nobody, func(_ context.Context, d string) error {
		os.WriteFile(filepath.Join(d, "PG_VERSION"), []byte("15\n"), 0o600) // half made
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Ensure = %v, want the initdb error", err)
	}
	if ents, _ := os.ReadDir(templates); len(ents) != 0 {
		t.Errorf("a failed initdb left %v", ents)
	}
	os.Mkdir(filepath.Join(templates, ".new-crashed"), 0o700) // an interrupted run's
	var calls atomic.Int32
	if _, err := Ensure(context.Background(), templates, "k1", nobody, nobody, fakeInitdb(&calls)); err != nil || calls.Load() != 1 {
		t.Fatalf("the next Ensure: %v, %d initdb runs", err, calls.Load())
	}
	k2, err := Ensure(context.Background(), templates, "k2", nobody, nobody, fakeInitdb(&calls))
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(templates)
	if len(ents) != 1 || filepath.Join(templates, ents[0].Name()) != k2 {
		t.Errorf("templates after a new key: %v, want %s alone", ents, k2)
	}
}
