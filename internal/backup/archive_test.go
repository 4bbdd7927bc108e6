package backup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/clusterstack"
)

var sample = Contents{
	Manifest: Manifest{Cluster: "demo", Namespace: "default", Account: "acme", UID: "u1", Created: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC),
		Versions: map[string]string{"kubernetes": "v1.37.2"}, Keys: []string{"/registry/configmaps/default/a"}},
	Files: sampleFiles(),
}

// sampleFiles is a dump and every identity file, as a backup holds them.
func sampleFiles() map[string][]byte {
	files := map[string][]byte{DatastoreFile: []byte("COPY public.kine FROM stdin;\n")}
	for n := range IdentityFiles(clusterstack.Layout{}) {
		files[n] = []byte("the file " + n)
	}
	return files
}

var key = []byte("0123456789abcdef0123456789abcdef")

// A cheap key derivation, so that every byte of an archive can be tried.
func archive(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b, key, sample, 10); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAnArchiveOpensAsItWasWritten(t *testing.T) {
	c, err := Open(archive(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Format != Format || c.Manifest.Cluster != "demo" || !slices.Equal(c.Manifest.Keys, sample.Manifest.Keys) || len(c.Manifest.Files) != 9 {
		t.Errorf("manifest %+v", c.Manifest)
	}
	for n, b := range sample.Files {
		if !bytes.Equal(c.Files[n], b) {
			t.Errorf("%s: %q, want %q", n, c.Files[n], b)
		}
	}
}

// Every byte changed, and every length cut short, is refused as a whole: nothing opens.
func TestATamperedOrTruncatedArchiveIsRefused(t *testing.T) {
	a := archive(t)
	for i := range a {
		b := slices.Clone(a)
		b[i] ^= 0x01
		_, err := Open(b, key)
		switch {
		case i < len(magic):
			if !errors.Is(err, ErrForeign) {
				t.Fatalf("byte %d of the magic changed: %v, want ErrForeign", i, err)
			}
		case err == nil:
			t.Fatalf("byte %d changed, and the archive opened", i)
		case !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrWrongKey):
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
	for n := range len(a) {
		if _, err := Open(a[:n], key); err == nil || (!errors.Is(err, ErrDamaged) && !errors.Is(err, ErrForeign)) {
			t.Fatalf("cut to %d of %d bytes: %v", n, len(a), err)
		}
	}
}

func TestAWrongKeyIsToldFromDamage(t *testing.T) {
	if _, err := Open(archive(t), []byte("another key of enough bytes")); !errors.Is(err, ErrWrongKey) {
		t.Errorf("wrong key: %v", err)
	}
	if _, err := Open([]byte("PGDMP\x01\x0e\x00 a pg_dump custom archive"), key); !errors.Is(err, ErrForeign) {
		t.Errorf("a foreign file: %v", err)
	}
	var b bytes.Buffer
	if err := Write(&b, []byte("short"), sample); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// The manifest is the truth: a file it does not list, or one it lists that is missing, is
// damage even inside an authenticated archive (a writer's bug, not an attacker).
func TestTheManifestListsExactlyTheFiles(t *testing.T) {
	c := Contents{Manifest: Manifest{Format: Format, Files: []File{{Name: DatastoreFile}}}, Files: map[string][]byte{DatastoreFile: nil, "extra": nil}}
	if err := c.verify(); err == nil {
		t.Error("an unlisted file passed")
	}
	c = Contents{Manifest: Manifest{Format: Format}, Files: map[string][]byte{}}
	if err := c.verify(); err == nil {
		t.Error("an archive without its datastore passed")
	}
	var b bytes.Buffer
	files := sampleFiles()
	delete(files, "identity/sa.key")
	if err := write(&b, key, Contents{Manifest: sample.Manifest, Files: files}, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(b.Bytes(), key); err == nil || !strings.Contains(err.Error(), "identity/sa.key") {
		t.Errorf("an archive without its service-account key: %v", err)
	}
}

func TestARestoreCarriesAllOfItsIdentityOnlyIntoItsOwnName(t *testing.T) {
	if got := Carried("demo", "demo"); len(got) != 8 || !slices.Contains(got, IdentityFile) {
		t.Errorf("into its own name: %v", got)
	}
	if got := Carried("demo", "demo2"); !slices.Equal(got, []string{EncryptionConfig}) {
		t.Errorf("into another name: %v, want the encryption key alone", got)
	}
}

func TestANewerKubernetesIsRefused(t *testing.T) {
	for _, c := range []struct {
		archive, here string
		ok            bool
	}{{"v1.37.2", "v1.37.2", true}, {"v1.36.0", "v1.37.2", true}, {"v1.38.0", "v1.37.2", false}, {"", "v1.37.2", true}, {"junk", "v1.37.2", true}} {
		err := CheckVersions(map[string]string{"kubernetes": c.archive}, map[string]string{"kubernetes": c.here})
		if (err == nil) != c.ok {
			t.Errorf("archive %q here %q: %v", c.archive, c.here, err)
		}
	}
	for _, c := range []struct {
		archive, here string
		ok            bool
	}{{"15", "15", true}, {"14", "15", true}, {"16", "15", false}, {"", "15", true}} {
		err := CheckVersions(map[string]string{"postgres": c.archive}, map[string]string{"postgres": c.here})
		if (err == nil) != c.ok {
			t.Errorf("postgres: archive %q here %q: %v", c.archive, c.here, err)
		}
	}
}

func TestAKeyComesFromAPrivateFileOrTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	good, open, short := filepath.Join(dir, "good"), filepath.Join(dir, "open"), filepath.Join(dir, "short")
	os.WriteFile(good, append(key, '\n'), 0o600)
	os.WriteFile(open, key, 0o644)
	os.WriteFile(short, []byte("abc"), 0o600)
	if k, err := LoadKey(good); err != nil || !bytes.Equal(k, key) {
		t.Errorf("a private key file: %q %v", k, err)
	}
	for _, f := range []string{open, short, filepath.Join(dir, "missing"), dir} {
		if _, err := LoadKey(f); err == nil {
			t.Errorf("%s was taken as a key file", f)
		}
	}
	t.Setenv(KeyEnv, "")
	if _, err := LoadKey(""); err == nil {
		t.Error("no key anywhere, and no error")
	}
	t.Setenv(KeyEnv, string(key))
	if k, err := LoadKey(""); err != nil || !bytes.Equal(k, key) {
		t.Errorf("the environment's key: %q %v", k, err)
	}
}

func TestMissingLeavesOutWhatExpires(t *testing.T) {
	want := []string{"/registry/configmaps/default/a", "/registry/events/default/e1", "/registry/leases/kube-system/l", "/registry/secrets/default/s"}
	have := []string{"/registry/configmaps/default/a", "/registry/namespaces/default"}
	if got := Missing(want, have); !slices.Equal(got, []string{"/registry/secrets/default/s"}) {
		t.Errorf("missing %v, want the Secret alone", got)
	}
}
