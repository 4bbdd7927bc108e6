package identitystore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/clusterstack"
)

// An identity read from a DataDir, kept in a Secret and placed in another DataDir is the
// same files; a Secret of another Cluster, or one that lacks a file, is refused.
func TestAnIdentityGoesThroughTheFrontWhole(t *testing.T) {
	from := clusterstack.Layout{Root: t.TempDir()}
	want := map[string][]byte{}
	for f, path := range backup.IdentityFiles(from) {
		os.MkdirAll(filepath.Dir(path), 0o700)
		want[f] = []byte("content of " + f)
		if err := os.WriteFile(path, want[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := Read(from)
	if err != nil {
		t.Fatal(err)
	}
	sec := ToSecret("team", "prod", "uid-1", nil, files)
	if sec.Name != "prod-identity" || sec.Namespace != "team" {
		t.Fatalf("the Secret is %s/%s", sec.Namespace, sec.Name)
	}
	for k := range sec.Data {
		if strings.Contains(k, "/") {
			t.Errorf("Secret key %q is not a valid key", k)
		}
	}
	if _, err := FromSecret(sec, "uid-2"); err == nil || !strings.Contains(err.Error(), "uid-1") {
		t.Errorf("another Cluster's Secret: %v", err)
	}
	got, err := FromSecret(sec, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	into := clusterstack.Layout{Root: t.TempDir()}
	os.MkdirAll(filepath.Join(into.Root, "pki"), 0o700)
	if err := Place(into, got); err != nil {
		t.Fatal(err)
	}
	placed, err := Read(into)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range want {
		if string(placed[f]) != string(b) {
			t.Errorf("%s placed as %q, want %q", f, placed[f], b)
		}
	}
	if Owner(into) != "" {
		t.Error("a DataDir that was not told whose copy it is says one")
	}
	SetOwner(into, "uid-1")
	if Owner(into) != "uid-1" {
		t.Errorf("Owner = %q", Owner(into))
	}
	for k := range sec.Data {
		delete(sec.Data, k)
		break
	}
	if _, err := FromSecret(sec, "uid-1"); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Errorf("a Secret without one of the files: %v", err)
	}
}

// The DataDir that records a uid is found, kept in step by Record, checked on each answer,
// and not named when two record the same uid.
func TestOwners(t *testing.T) {
	dir := t.TempDir()
	layout := func(name string) clusterstack.Layout { return clusterstack.Layout{Root: filepath.Join(dir, name)} }
	for _, n := range []string{"a", "b", "c", "d"} {
		if err := os.MkdirAll(layout(n).Root, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	SetOwner(layout("a"), "u-a")
	SetOwner(layout("c"), "u-twice")
	SetOwner(layout("d"), "u-twice")
	o := NewOwners(dir, layout)
	if got := o.Of("u-a"); got != "a" {
		t.Errorf("Of(u-a) = %q, want a", got)
	}
	if got := o.Of("u-twice"); got != "" {
		t.Errorf("two DataDirs record one uid: Of = %q, want none", got)
	}
	if err := o.Record("b", "u-b"); err != nil || o.Of("u-b") != "b" || Owner(layout("b")) != "u-b" {
		t.Errorf("Record(b): %v; Of = %q, owner file %q", err, o.Of("u-b"), Owner(layout("b")))
	}
	os.RemoveAll(layout("a").Root)
	if got := o.Of("u-a"); got != "" {
		t.Errorf("its DataDir removed: Of(u-a) = %q", got)
	}
}
