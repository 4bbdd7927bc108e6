package backup

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"socialweb.computer/kcp/internal/clusterstack"
)

// A staged restore reads back as written; its identity is placed, all of it into the
// cluster's own name, and placed again until marked; a DataDir minted without it is
// refused; Finish removes the staging and the mark.
func TestAStagedRestoreIsPlacedWhole(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "restores", "demo")
	if err := Stage(dir, Contents{Manifest: sample.Manifest, Files: sampleFiles()}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("staging: %v %v", fi, err)
	}
	m, ok, err := Staged(dir)
	if err != nil || !ok || m.Cluster != "demo" {
		t.Fatalf("staged: %+v %v %v", m, ok, err)
	}
	l := clusterstack.Layout{Root: filepath.Join(root, "clusters", "demo")}
	os.MkdirAll(l.PKIDir(), 0o700)
	if err := PlaceIdentity(dir, m, "demo", l); err != nil {
		t.Fatal(err)
	}
	for n, path := range IdentityFiles(l) {
		if b, _ := os.ReadFile(path); !bytes.Equal(b, sampleFiles()[n]) {
			t.Errorf("%s: %q", path, b)
		}
	}
	// Once marked, placed files are left as they are (what was minted from them stays).
	os.WriteFile(l.CACert(), []byte("minted since"), 0o600)
	if err := PlaceIdentity(dir, m, "demo", l); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(l.CACert()); string(b) != "minted since" {
		t.Error("a marked DataDir was placed again")
	}
	if err := Finish(dir, l); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := Staged(dir); ok || exists(l.RestorePlaced()) {
		t.Error("the staging or the mark is left once finished")
	}
	// A DataDir minted without the restore (no mark, an admin kubeconfig) is refused.
	other := clusterstack.Layout{Root: filepath.Join(root, "clusters", "other")}
	os.MkdirAll(other.PKIDir(), 0o700)
	os.WriteFile(other.AdminKubeconfig(), []byte("minted"), 0o600)
	if err := PlaceIdentity(dir, m, "other", other); err == nil {
		t.Error("identity placed in a DataDir minted without the restore")
	}
}
