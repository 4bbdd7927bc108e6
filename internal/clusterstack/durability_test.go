package clusterstack

import (
	"strings"
	"testing"
)

// Invariant 27: what an apiserver acknowledged is on disk. The settings that carry it are
// on every argv, whatever a configuration file might say.
func TestEveryDatastoreWritesThroughToDisk(t *testing.T) {
	pg := strings.Join(spec().PostgresArgv(), " ")
	for _, want := range []string{"-c fsync=on", "-c synchronous_commit=on", "-c full_page_writes=on"} {
		if !strings.Contains(pg, want) {
			t.Errorf("postgres argv lacks %q: %s", want, pg)
		}
	}
	s := spec()
	s.Front = true
	ep, _ := flag(s.KineArgv(), "endpoint")
	for _, want := range []string{"_journal=WAL", "_synchronous=FULL"} {
		if !strings.Contains(ep, want) {
			t.Errorf("the front's kine endpoint %q lacks %s", ep, want)
		}
	}
}
