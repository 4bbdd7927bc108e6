package clusterprovider

import (
	"strings"
	"testing"
)

func TestStepProgressReadsInOrder(t *testing.T) {
	var p []string
	for _, e := range [][2]string{{"postgres", "starting"}, {"postgres", "ready"}, {"kine", "starting"}, {"kine", "ready"}, {"kube-apiserver", "starting"}} {
		p = stepProgress(p, e[0], e[1])
	}
	if got := strings.Join(p, ", "); got != "postgres ready, kine ready, kube-apiserver starting" {
		t.Errorf("%q", got)
	}
}
