package leftovers

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// A stop is judged by what Find reads: the processes under the directory (not a sibling
// whose name merely starts the same) and the leases that count; after Kill, none.
func TestFindSeesWhatIsLeftAndKillEndsIt(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a")
	start := func(marker string) *processrunner.Process {
		r, err := processrunner.Start(processrunner.Spec{Argv: []string{"/bin/sh", "-c", "sleep 300; :", marker}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop(time.Second) })
		// "; :" keeps the shell (a bash as sh would exec a lone command, dropping the marker).
		return r
	}
	ours := start(filepath.Join(dir, "data"))
	start(filepath.Join(root, "ab", "data")) // a sibling's: never ours

	bookPath := filepath.Join(root, "ports.json")
	rng := portallocator.Range{First: 32200, Last: 32299}
	book, err := portallocator.Open(bookPath, rng)
	if err != nil {
		t.Fatal(err)
	}
	port, err := book.Acquire("a/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := book.Acquire("ab/kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	scope := Scope{Dir: dir, Programs: []string{"/bin/sh"}, Book: bookPath, Ports: rng, Leased: func(h string) bool { return h == "a/kube-apiserver" }}

	left, err := Find(scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Processes) != 1 || left.Processes[0].Pid != ours.Pid() || len(left.Leases) != 1 || left.Leases[0].Port != port {
		t.Fatalf("found %s; want pid %d and port %d alone", left, ours.Pid(), port)
	}
	if left.None() || !strings.Contains(left.String(), "leased to a/kube-apiserver") {
		t.Fatalf("an operator is told what is left, by pid and port: %q", left)
	}

	Kill(left.Processes)
	if err := book.Release(port, "a/kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err = Find(scope)
		if err != nil {
			t.Fatal(err)
		}
		if left.None() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still left after Kill and Release: %s", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
