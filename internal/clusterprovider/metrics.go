package clusterprovider

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/materialiser"
)

// Metrics are the service's Prometheus metrics, on a registry of their own (no package
// globals: one process may run more than one loop in tests), with the Go and process
// collectors the standard dashboards read (go_goroutines, process_resident_memory_bytes).
type Metrics struct {
	Registry  *prometheus.Registry
	phases    *prometheus.GaugeVec
	phase     *prometheus.GaugeVec // per cluster, one series per phase, 1 on the current one
	bringUp   prometheus.Histogram
	teardown  prometheus.Histogram
	wake      prometheus.Histogram
	restarts  *prometheus.CounterVec
	adopted   *prometheus.CounterVec
	failovers prometheus.Counter
	nodes     *prometheus.GaugeVec
	certs     *prometheus.GaugeVec
	byCluster map[string]materialiser.Phase

	// expiries is each cluster's soonest leaf expiry, for the days-left gauge computed at
	// each scrape; now is the clock it is computed by.
	expMu    sync.Mutex
	expiries map[string]time.Time
	now      func() time.Time
}

// NewMetrics registers the metrics.
func NewMetrics() *Metrics {
	buckets := []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_clusters",
			Help: "Clusters this provider materialises, by phase."}, []string{"phase"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_cluster_phase",
			Help: "Each cluster's phase: 1 on the phase it is in, 0 on the others (as kube-state-metrics' kube_pod_status_phase)."}, []string{"cluster", "phase"}),
		bringUp: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_cluster_bringup_seconds",
			Help: "Time from a bring-up's start to every gate passed.", Buckets: buckets}),
		teardown: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_cluster_teardown_seconds",
			Help: "Time to reap a cluster's groups.", Buckets: buckets}),
		wake: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "socialweb_cluster_wake_seconds",
			Help: "Time from the first request held for a sleeping cluster to the cluster Ready.", Buckets: buckets}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_component_restarts_total",
			Help: "Components that exited on their own, after which their cluster was brought back."}, []string{"component"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "socialweb_clusters_taken_over_total",
			Help: "Clusters with an external datastore this instance took over from an instance whose lease had expired."}),
		adopted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "socialweb_clusters_adopted_total",
			Help: "Clusters this run took over running as an earlier run left them (current: as they were; stale: then restarted one at a time)."}, []string{"state"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_cluster_nodes",
			Help: "Guests listed in each cluster's nodes.json."}, []string{"cluster"}),
		// A timestamp, as cert-manager's certmanager_certificate_expiration_timestamp_seconds:
		// an alert computes the days left (minus time()) and a renewal shows as a step.
		certs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "socialweb_cluster_certificate_expiry_timestamp_seconds",
			Help: "When each cluster's soonest-expiring leaf certificate expires (Unix seconds), read at its last start or mint."}, []string{"cluster"}),
		byCluster: map[string]materialiser.Phase{},
		expiries:  map[string]time.Time{},
		now:       time.Now,
	}
	m.Registry.MustRegister(m.phases, m.phase, m.bringUp, m.teardown, m.wake, m.restarts, m.adopted, m.failovers, m.nodes, m.certs, daysLeftCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, p := range phases {
		m.phases.WithLabelValues(string(p)).Set(0)
	}
	return m
}

// phases are the phases a materialised cluster can be in, each a series of the gauges.
var phases = []materialiser.Phase{materialiser.PhaseInitializing, materialiser.PhaseReady, materialiser.PhaseUnavailable, materialiser.PhaseDraining, materialiser.PhaseSleeping}

// setPhase records key's phase ("" when the Cluster is gone) and recounts.
func (m *Metrics) setPhase(key string, p materialiser.Phase) {
	if p == "" {
		delete(m.byCluster, key)
		m.nodes.DeleteLabelValues(key)
		m.certs.DeleteLabelValues(key)
		m.expMu.Lock()
		delete(m.expiries, key)
		m.expMu.Unlock()
		m.phase.DeletePartialMatch(prometheus.Labels{"cluster": key})
	} else {
		m.byCluster[key] = p
		for _, ph := range phases {
			m.phase.WithLabelValues(key, string(ph)).Set(oneIf(ph == p))
		}
	}
	counts := map[materialiser.Phase]float64{}
	for _, ph := range m.byCluster {
		counts[ph]++
	}
	for _, ph := range phases {
		m.phases.WithLabelValues(string(ph)).Set(counts[ph])
	}
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// setCertificates records when the soonest leaf certificate in certs expires.
func (m *Metrics) setCertificates(key string, certs []certrenewal.Cert) {
	m.expMu.Lock()
	defer m.expMu.Unlock()
	if c, ok := certrenewal.SoonestLeaf(certs); ok {
		m.certs.WithLabelValues(key).Set(float64(c.NotAfter.Unix()))
		m.expiries[key] = c.NotAfter
	} else {
		m.certs.DeleteLabelValues(key)
		delete(m.expiries, key)
	}
}

// daysLeftCollector is the days left on each cluster's soonest-expiring leaf, computed
// at the scrape (a dashboard's number; an alert may use either series).
type daysLeftCollector struct{ m *Metrics }

var daysLeftDesc = prometheus.NewDesc("socialweb_cluster_certificate_days_left",
	"Days left until each cluster's soonest-expiring leaf certificate expires, at the scrape (negative: expired).", []string{"cluster"}, nil)

func (c daysLeftCollector) Describe(ch chan<- *prometheus.Desc) { ch <- daysLeftDesc }

func (c daysLeftCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.expMu.Lock()
	defer c.m.expMu.Unlock()
	now := c.m.now()
	for key, at := range c.m.expiries {
		ch <- prometheus.MustNewConstMetric(daysLeftDesc, prometheus.GaugeValue, at.Sub(now).Hours()/24, key)
	}
}

// usageCollector reads each running cluster's control group when /metrics is scraped, as
// cAdvisor's container_* series are: no reading goes stale between scrapes.
type usageCollector struct {
	usage   func() map[string]cgroups.Usage // by cluster key
	objects func() map[string]int64
}

var (
	memoryDesc = prometheus.NewDesc("socialweb_cluster_memory_bytes",
		"Memory charged to each running cluster's control group, page cache included.", []string{"cluster"}, nil)
	limitHitsDesc = prometheus.NewDesc("socialweb_cluster_memory_limit_hits_total",
		"Times each running cluster's group met its memory limit (the kernel reclaimed, or OOM-killed inside it).", []string{"cluster"}, nil)
	cpuDesc = prometheus.NewDesc("socialweb_cluster_cpu_seconds_total",
		"CPU time each running cluster's group used since it was created.", []string{"cluster"}, nil)
	pidsDesc = prometheus.NewDesc("socialweb_cluster_pids",
		"Processes and threads in each running cluster's group.", []string{"cluster"}, nil)
	objectsDesc = prometheus.NewDesc("socialweb_cluster_objects",
		"Objects each running cluster stores (events and leases aside), at its last count against its cap.", []string{"cluster"}, nil)
)

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memoryDesc, limitHitsDesc, cpuDesc, pidsDesc, objectsDesc} {
		ch <- d
	}
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	for key, u := range c.usage() {
		ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(u.MemoryBytes), key)
		ch <- prometheus.MustNewConstMetric(limitHitsDesc, prometheus.CounterValue, float64(u.LimitHits), key)
		ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, u.CPU.Seconds(), key)
		ch <- prometheus.MustNewConstMetric(pidsDesc, prometheus.GaugeValue, float64(u.Pids), key)
	}
	for key, n := range c.objects() {
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(n), key)
	}
}

// backupCollector reads each cluster's last backup record when /metrics is scraped: the
// CLI writes it on the provider's host, the provider only reports it.
type backupCollector struct {
	last func() map[string]time.Time // by cluster key; clusters never backed up are absent
}

var lastBackupDesc = prometheus.NewDesc("socialweb_cluster_last_backup_timestamp_seconds",
	"When each cluster's last backup was taken (Unix seconds; socialweb-kcp backup). Absent: never.", []string{"cluster"}, nil)

func (c backupCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lastBackupDesc }

func (c backupCollector) Collect(ch chan<- prometheus.Metric) {
	for key, t := range c.last() {
		ch <- prometheus.MustNewConstMetric(lastBackupDesc, prometheus.GaugeValue, float64(t.Unix()), key)
	}
}

// collectUsage reports each running cluster's control-group usage and stored objects.
func (m *Metrics) collectUsage(usage func() map[string]cgroups.Usage, objects func() map[string]int64) {
	m.Registry.MustRegister(usageCollector{usage, objects})
}

// collectBackups reports each cluster's last backup.
func (m *Metrics) collectBackups(last func() map[string]time.Time) {
	m.Registry.MustRegister(backupCollector{last})
}
