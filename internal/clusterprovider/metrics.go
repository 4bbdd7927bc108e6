package clusterprovider

import (
	"github.com/prometheus/client_golang/prometheus"

	"socialweb.computer/kcp/internal/materialiser"
)

// Metrics are the service's Prometheus metrics, on a registry of their own (no package
// globals: one process may run more than one loop in tests).
type Metrics struct {
	Registry  *prometheus.Registry
	phases    *prometheus.GaugeVec
	bringUp   prometheus.Histogram
	teardown  prometheus.Histogram
	restarts  *prometheus.CounterVec
	nodes     *prometheus.GaugeVec
	byCluster map[string]materialiser.Phase
}

// NewMetrics registers the metrics.
func NewMetrics() *Metrics {
	buckets := []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_clusters",
			Help: "Clusters this provider materialises, by phase."}, []string{"phase"}),
		bringUp: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_cluster_bringup_seconds",
			Help: "Time from a bring-up's start to every gate passed.", Buckets: buckets}),
		teardown: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_cluster_teardown_seconds",
			Help: "Time to reap a cluster's groups.", Buckets: buckets}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_component_restarts_total",
			Help: "Components that exited on their own, after which their cluster was brought back."}, []string{"component"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_cluster_nodes",
			Help: "Guests listed in each cluster's nodes.json."}, []string{"cluster"}),
		byCluster: map[string]materialiser.Phase{},
	}
	m.Registry.MustRegister(m.phases, m.bringUp, m.teardown, m.restarts, m.nodes)
	for _, p := range []materialiser.Phase{materialiser.PhaseInitializing, materialiser.PhaseReady, materialiser.PhaseUnavailable, materialiser.PhaseDraining} {
		m.phases.WithLabelValues(string(p)).Set(0)
	}
	return m
}

// setPhase records key's phase ("" when the Cluster is gone) and recounts.
func (m *Metrics) setPhase(key string, p materialiser.Phase) {
	if p == "" {
		delete(m.byCluster, key)
		m.nodes.DeleteLabelValues(key)
	} else {
		m.byCluster[key] = p
	}
	counts := map[materialiser.Phase]float64{materialiser.PhaseInitializing: 0, materialiser.PhaseReady: 0, materialiser.PhaseUnavailable: 0, materialiser.PhaseDraining: 0}
	for _, ph := range m.byCluster {
		counts[ph]++
	}
	for ph, n := range counts {
		m.phases.WithLabelValues(string(ph)).Set(n)
	}
}
