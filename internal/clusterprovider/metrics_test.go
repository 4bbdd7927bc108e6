package clusterprovider

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"socialweb.computer/kcp/internal/certrenewal"
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
socialweb_clusters{phase="Sleeping"} 0
socialweb_clusters{phase="Unavailable"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "socialweb_clusters"); err != nil {
		t.Fatal(err)
	}
	// Per cluster: 1 on its phase, 0 on the others; a cluster gone has no series left.
	want = `
# HELP socialweb_cluster_phase Each cluster's phase: 1 on the phase it is in, 0 on the others (as kube-state-metrics' kube_pod_status_phase).
# TYPE socialweb_cluster_phase gauge
socialweb_cluster_phase{cluster="a/one",phase="Draining"} 0
socialweb_cluster_phase{cluster="a/one",phase="Initializing"} 0
socialweb_cluster_phase{cluster="a/one",phase="Ready"} 1
socialweb_cluster_phase{cluster="a/one",phase="Sleeping"} 0
socialweb_cluster_phase{cluster="a/one",phase="Unavailable"} 0
socialweb_cluster_phase{cluster="a/two",phase="Draining"} 0
socialweb_cluster_phase{cluster="a/two",phase="Initializing"} 0
socialweb_cluster_phase{cluster="a/two",phase="Ready"} 0
socialweb_cluster_phase{cluster="a/two",phase="Sleeping"} 0
socialweb_cluster_phase{cluster="a/two",phase="Unavailable"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "socialweb_cluster_phase"); err != nil {
		t.Fatal(err)
	}
}

// The standard dashboards' series are there: the Go runtime's and the process's.
func TestMetricsHaveTheGoAndProcessCollectors(t *testing.T) {
	mfs, err := NewMetrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if !have[want] {
			t.Errorf("no %s", want)
		}
	}
}

// The days left on a cluster's soonest leaf are counted at the scrape, and go with the
// cluster.
func TestCertificateDaysLeftAreCountedAtTheScrape(t *testing.T) {
	m := NewMetrics()
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return t0 }
	m.setPhase("a/one", materialiser.PhaseReady)
	m.setCertificates("a/one", []certrenewal.Cert{
		{Subject: "ca", CA: true, NotAfter: t0.Add(3650 * 24 * time.Hour)},
		{Subject: "late", NotAfter: t0.Add(300 * 24 * time.Hour)},
		{Subject: "soon", NotAfter: t0.Add(36 * time.Hour)},
	})
	want := `
# HELP socialweb_cluster_certificate_days_left Days left until each cluster's soonest-expiring leaf certificate expires, at the scrape (negative: expired).
# TYPE socialweb_cluster_certificate_days_left gauge
socialweb_cluster_certificate_days_left{cluster="a/one"} 1.5
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "socialweb_cluster_certificate_days_left"); err != nil {
		t.Fatal(err)
	}
	m.setPhase("a/one", "")
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(""), "socialweb_cluster_certificate_days_left"); err != nil {
		t.Fatal(err)
	}
}
