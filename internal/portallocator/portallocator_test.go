package portallocator

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func freeRange(t *testing.T, n int) Range {
	t.Helper()
	// Find n consecutive bindable ports high in the range; tests only need them momentarily.
	for first := 40000; first < 60000; first += 97 {
		ok := true
		for p := first; p < first+n; p++ {
			if !canBind(p) {
				ok = false
				break
			}
		}
		if ok {
			return Range{first, first + n - 1}
		}
	}
	t.Fatal("no free port range")
	return Range{}
}

func TestLeaseBookSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	rng := freeRange(t, 3)
	b, err := Open(path, rng)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := b.Acquire("a/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Acquire("b/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if pa == pb {
		t.Fatalf("one port leased twice: %d", pa)
	}
	again, _ := b.Acquire("a/kube-apiserver")
	if again != pa {
		t.Fatalf("holder a got a second port %d, holds %d", again, pa)
	}
	// A new book from the same file: as after a provider restart.
	b2, err := Open(path, rng)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Holder(pa) != "a/kube-apiserver" || b2.Holder(pb) != "b/kube-apiserver" {
		t.Fatalf("leases lost across restart: %v", b2.Leases())
	}
	pc, err := b2.Acquire("c/kube-apiserver")
	if err != nil || pc == pa || pc == pb {
		t.Fatalf("third lease = %d, %v (a=%d b=%d)", pc, err, pa, pb)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("lease book mode %v", st.Mode().Perm())
	}
}

func TestReleaseRefusesAnotherHolder(t *testing.T) {
	b, _ := Open(filepath.Join(t.TempDir(), "leases.json"), freeRange(t, 2))
	p, _ := b.Acquire("a")
	if err := b.Release(p, "b"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("release by b = %v, want ErrNotHolder", err)
	}
	if err := b.Release(p, "a"); err != nil {
		t.Fatal(err)
	}
	if b.Holder(p) != "" {
		t.Fatal("released lease still held")
	}
}

func TestExhaustedRangeIsAClearError(t *testing.T) {
	rng := freeRange(t, 1)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(rng.First))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, _ := Open(filepath.Join(t.TempDir(), "leases.json"), rng)
	_, err = b.Acquire("a")
	if !errors.Is(err, ErrExhausted) {
		t.Fatalf("acquire with the only port in use = %v, want ErrExhausted", err)
	}
	if len(b.Leases()) != 0 {
		t.Fatalf("a failed acquire changed the book: %v", b.Leases())
	}
}

func TestCorruptBookIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, err := Open(path, Range{40000, 40010}); err == nil {
		t.Fatal("corrupt lease book opened as empty")
	}
}

func TestParseRange(t *testing.T) {
	for _, bad := range []string{"", "30000", "a-b", "2000-1000", "80-90", "60000-70000"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted", bad)
		}
	}
	if r, err := ParseRange("30000-30999"); err != nil || r != (Range{30000, 30999}) {
		t.Fatalf("ParseRange = %v, %v", r, err)
	}
}
