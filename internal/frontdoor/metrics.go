package frontdoor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the front door's Prometheus series, per cluster where a cluster is known.
// A nil *Metrics records nothing, so tests and callers without /metrics pass none.
type Metrics struct {
	connections *prometheus.CounterVec
	open        *prometheus.GaugeVec
	bytes       *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	backendWait prometheus.Histogram
}

// NewMetrics registers the front door's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_frontdoor_connections_total",
			Help: "Connections the front door piped to each cluster's apiserver."}, []string{"cluster"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_frontdoor_open_connections",
			Help: "Connections open through the front door to each cluster now."}, []string{"cluster"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_frontdoor_bytes_total",
			Help: "Bytes piped per cluster: in from clients, out to them."}, []string{"cluster", "direction"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_frontdoor_refused_total",
			Help: "Connections refused, by reason: not_tls, no_server_name, unknown_name, unknown_cluster, unavailable, waking (held as long as a client waits, then closed for it to retry)."}, []string{"reason"}),
		backendWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_frontdoor_backend_wait_seconds",
			Help:    "Time from a routed ClientHello to its apiserver connected: includes a wake when the cluster slept.",
			Buckets: []float64{.001, .005, .02, .1, .5, 1, 2, 5, 10, 20, 60}}),
	}
	reg.MustRegister(m.connections, m.open, m.bytes, m.refusals, m.backendWait)
	for _, r := range []string{"not_tls", "no_server_name", "unknown_name", "unknown_cluster", "unavailable", "waking"} {
		m.refusals.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) connected(cluster string, waited time.Duration) {
	if m == nil {
		return
	}
	m.connections.WithLabelValues(cluster).Inc()
	m.backendWait.Observe(waited.Seconds())
}

func (m *Metrics) opened(cluster string) {
	if m != nil {
		m.open.WithLabelValues(cluster).Inc()
	}
}

func (m *Metrics) closed(cluster string) {
	if m != nil {
		m.open.WithLabelValues(cluster).Dec()
	}
}

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}

// byteCounters are the adders for cluster's bytes in and out; nil without metrics.
func (m *Metrics) byteCounters(cluster string) (in, out func(float64)) {
	if m == nil {
		return nil, nil
	}
	return m.bytes.WithLabelValues(cluster, "in").Add, m.bytes.WithLabelValues(cluster, "out").Add
}

func (m *Metrics) forget(cluster string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"cluster": cluster}
	m.connections.DeletePartialMatch(l)
	m.open.DeletePartialMatch(l)
	m.bytes.DeletePartialMatch(l)
}
