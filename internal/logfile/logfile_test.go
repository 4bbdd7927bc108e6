package logfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A log another process appends to never stays past its cap: Trim moves what it holds to
// log.1 (log.1 to log.2, the oldest dropped) and empties it in place, and the writer's next
// line lands at its start.
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
	w.Write([]byte(strings.Repeat("c", 60)))
	if err := Trim(path, 50, 1); err != nil { // keep 1: the 100 bytes are dropped
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path + ".1"); len(b) != 62 {
		t.Fatalf("%s.1 holds %d bytes, want the 62 trimmed second", path, len(b))
	}
	if fi, err := os.Stat(path + ".1"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s.1: %v %v, want 0600", path, fi.Mode(), err)
	}
	w.Write([]byte("b\n"))
	if err := Trim(path, 50, 2); err != nil { // under its cap: untouched
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "b\n" {
		t.Fatalf("a log under its cap was changed: %q", b)
	}
}
