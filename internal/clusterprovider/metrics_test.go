package clusterprovider

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"socialweb.computer/kcp/internal/materialiser"
)

func TestClustersAreCountedByPhase(t *testing.T) {
	m := NewMetrics()
	m.setPhase("a/one", materialiser.PhaseReady)
	m.setPhase("a/two", materialiser.PhaseReady)
	m.setPhase("b/three", materialiser.PhaseInitializing)
	m.setPhase("a/two", materialiser.PhaseUnavailable)
	m.setPhase("b/three", "")
	want := `
# HELP socialweb_clusters Clusters this provider materialises, by phase.
# TYPE socialweb_clusters gauge
socialweb_clusters{phase="Draining"} 0
socialweb_clusters{phase="Initializing"} 0
socialweb_clusters{phase="Ready"} 1
socialweb_clusters{phase="Unavailable"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "socialweb_clusters"); err != nil {
		t.Fatal(err)
	}
}
