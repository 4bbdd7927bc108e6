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
