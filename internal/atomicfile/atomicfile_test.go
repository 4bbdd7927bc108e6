package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileReplacesWholeAndSetsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "nodes.json")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "[]" {
		t.Fatalf("content = %q, %v", got, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
}

func TestWriteFileFailsLoudly(t *testing.T) {
	err := WriteFile(filepath.Join(t.TempDir(), "missing", "x"), []byte("x"), 0o600)
	if err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// A rewrite keeps the owner of the file it replaces: a tenant's user still reads it.
func TestARewriteKeepsTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file away needs root")
	}
	path := filepath.Join(t.TempDir(), "nodes.json")
	if err := WriteFile(path, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, 4343); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("[1]"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 4343 || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %v after a rewrite, want 0:4343 0640", st.Uid, st.Gid, fi.Mode().Perm())
	}
}
