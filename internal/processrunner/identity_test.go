package processrunner

import (
	"os"
	"testing"
)

func TestAnExitedStateIsReadAfterTheCommandName(t *testing.T) {
	for stat, want := range map[string]bool{
		"42 (kube-apiserver) S 1 42": false,
		"42 (kube-apiserver) Z 1 42": true,
		"42 (a) (b) Z) R 1 42":       false, // the name holds ") Z)": the last ')' ends it
		"42 (postgres: x) X 1 42":    true,
		"42 (truncated":              true,
	} {
		if got := exitedState([]byte(stat)); got != want {
			t.Errorf("exitedState(%q) = %v, want %v", stat, got, want)
		}
	}
	if isZombie(os.Getpid()) {
		t.Error("this test's own process counts as exited")
	}
}

// An exiting process whose leader has gone (its cmdline reads empty) is still the same
// process until every thread of it has: only another start time is another process.
func TestSamePIDWhileItsLeaderExits(t *testing.T) {
	id := Identity{Pid: 42, StartTime: 1000, Cmdline: []string{"/bin/kube-apiserver", "--secure-port=31800"}}
	for _, c := range []struct {
		now  Identity
		want bool
	}{
		{Identity{Pid: 42, StartTime: 1000, Cmdline: id.Cmdline}, true},
		{Identity{Pid: 42, StartTime: 1000}, true}, // the leader has exited, its threads not yet
		{Identity{Pid: 42, StartTime: 1000, Cmdline: []string{"/bin/sh"}}, false},
		{Identity{Pid: 42, StartTime: 2000, Cmdline: id.Cmdline}, false},
		{Identity{Pid: 42, StartTime: 2000}, false},
	} {
		if got := samePID(c.now, id); got != c.want {
			t.Errorf("samePID(%+v) = %v, want %v", c.now, got, c.want)
		}
	}
}
