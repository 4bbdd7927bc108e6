package logfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// A log never passes its cap: writes rotate it into log.1 and log.2, the oldest dropped,
// each file 0600, and what is kept is the newest output in order.
func TestRotationKeepsTheNewestWithinTheCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ccm.log")
	l, err := Open(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"aaaa\n", "bbbb\n", "cccc\n", "dddd\n", "eeee\n", "ffff\n", "gggg\n"} {
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if got := read(t, path+".2") + read(t, path+".1") + read(t, path); got != "cccc\ndddd\neeee\nffff\ngggg\n" {
		t.Errorf("kept %q", got)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("log.3 exists: %v", err)
	}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 10 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", p, fi, err)
		}
	}
	if _, err := l.Write([]byte("x")); err == nil {
		t.Error("a write after Close succeeded")
	}
}

// A reopened log counts what is already there, so a restart does not reset the cap.
func TestReopenCountsTheExistingSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kine.log")
	os.WriteFile(path, []byte("12345678"), 0o600)
	l, err := Open(path, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("abc"))
	l.Close()
	if read(t, path+".1") != "12345678" || read(t, path) != "abc" {
		t.Errorf("log %q, log.1 %q", read(t, path), read(t, path+".1"))
	}
}

// One write larger than the cap is kept whole, never split or dropped.
func TestALargeWriteIsKeptWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.log")
	l, _ := Open(path, 4, 0)
	l.Write([]byte("ab"))
	big := strings.Repeat("z", 9)
	l.Write([]byte(big))
	l.Close()
	if read(t, path) != big {
		t.Errorf("%q", read(t, path))
	}
}

func TestTrimCapsALogAnotherProcessAppendsTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte(strings.Repeat("a", 100)))
	if err := Trim(path, 50, 2); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("b\n")) // the writer's descriptor is still good, at the new start
	if b, _ := os.ReadFile(path); string(b) != "b\n" {
		t.Fatalf("after Trim the log holds %q, want the writer's next line alone", b)
	}
	if b, _ := os.ReadFile(path + ".1"); len(b) != 100 {
		t.Fatalf("%s.1 holds %d bytes, want the 100 trimmed", path, len(b))
	}
	if err := Trim(path, 50, 2); err != nil { // under its cap: untouched
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "b\n" {
		t.Fatalf("a log under its cap was changed: %q", b)
	}
}
