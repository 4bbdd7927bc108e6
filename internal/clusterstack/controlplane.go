package clusterstack

import (
	"path/filepath"
	"strconv"
	"time"

	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/procgroup"
)

// APIServerArgv is the tenant kube-apiserver: the stack's only TCP listener (on loopback
// unless BindAddress says otherwise), storing in kine over its unix socket.
func (s Spec) APIServerArgv() []string {
	l := s.Layout()
	f := map[string]string{
		"etcd-servers":                       "unix://" + l.KineSocket(),
		"storage-backend":                    "etcd3",
		"bind-address":                       s.bindAddress(),
		"advertise-address":                  s.advertiseAddress(),
		"secure-port":                        strconv.Itoa(s.APIServerPort),
		"tls-cert-file":                      l.APIServerCert(),
		"tls-private-key-file":               l.APIServerKey(),
		"client-ca-file":                     l.CACert(),
		"service-account-key-file":           l.ServiceAccountPub(),
		"service-account-signing-key-file":   l.ServiceAccountKey(),
		"service-account-issuer":             "https://kubernetes.default.svc",
		"service-cluster-ip-range":           s.serviceCIDR(),
		"authorization-mode":                 "Node,RBAC",
		"enable-admission-plugins":           "NodeRestriction",
		"enable-bootstrap-token-auth":        "true",
		"encryption-provider-config":         l.EncryptionConfig(),
		"requestheader-client-ca-file":       l.FrontProxyCACert(),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             l.FrontProxyClientCert(),
		"proxy-client-key-file":              l.FrontProxyClientKey(),
		"profiling":                          "false",
		// The "kubernetes" Service's endpoints would have to name a non-loopback address;
		// tenants reach the apiserver through their kubeconfig, not the Service.
		"endpoint-reconciler-type": "none",
		// The datastore forgets history as an etcd under a kube-apiserver does: the
		// apiserver compacts every interval to the revision it saw one interval before
		// (kine keeps nothing more, KineArgv), so a continue token or a watch older than
		// that gets 410 Gone.
		"etcd-compaction-interval": s.compactionInterval().String(),
	}
	if s.Front {
		f["allow-privileged"] = "true"
	}
	if !s.WatchCache() {
		f["watch-cache"] = "false"
	}
	if !s.Front {
		if !s.SplitControlPlane {
			// Idle work for nobody (docs/benchmarks.md, "Idle work left out"); the split
			// layout keeps the argv it was started with, so that it is adopted as it runs.
			// Counting every resource's objects once a minute (about one count a second
			// through kine to PostgreSQL) feeds a metric and priority and fairness's
			// estimate of a list's cost; without a count, a list is estimated at the
			// fewest seats, and a tenant's lists are bounded by its control group.
			f["etcd-count-metric-poll-period"] = "0"
			// A tenant has exactly one apiserver. Its identity lease (a write every 10 s)
			// is read only by the peer proxy and the storage-version garbage collector,
			// and the peer proxy (a lease of its own) forwards requests to other
			// apiservers of a mixed-version control plane; there are none.
			// Without a watch cache each watch is an etcd watch of its own, about 120 at
			// idle, and ConcurrentWatchObjectDecode (on since 1.37) keeps two goroutines
			// for each (one schedules, one collects; each event is decoded in a goroutine
			// of its own) where the serial path keeps one. It is for watches whose events
			// are slow to transform (large objects, a conversion webhook, decryption
			// through a KMS); a tenant's watches see few events, decrypted locally.
			f["feature-gates"] = "APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false,ConcurrentWatchObjectDecode=false"
		}
		// The apiserver's own client identity towards kubelets (logs, exec, port-forward):
		// a kubelet with anonymous auth off and webhook authorization asks this apiserver
		// whether that identity may, and RBAC says yes through system:kubelet-api-admin.
		f["kubelet-client-certificate"] = l.KubeletClientCert()
		f["kubelet-client-key"] = l.KubeletClientKey()
		// A guest's name resolves nowhere on this host; the address our CCM sets does.
		f["kubelet-preferred-address-types"] = "InternalIP,ExternalIP,Hostname"
		// A tenant's pods may run on real guests, namespaces of this host: a privileged
		// container there is root on the host, so none is admitted, whatever a namespace's
		// labels say; PodSecurity's "baseline" (no hostPath, host namespaces or added
		// capabilities) is every namespace's default (AdmissionConfig).
		f["allow-privileged"] = "false"
		f["admission-control-config-file"] = l.AdmissionConfig()
		// The tenant's audit log, bounded as the component logs are (10 MiB, 2 kept).
		f["audit-policy-file"] = l.AuditPolicy()
		f["audit-log-path"] = l.AuditLog()
		f["audit-log-format"] = "json"
		f["audit-log-maxsize"] = strconv.Itoa(auditlog.MaxSizeMiB)
		f["audit-log-maxbackup"] = strconv.Itoa(auditlog.MaxBackups)
	}
	return append([]string{s.Bin("kube-apiserver")}, flags(f)...)
}

// ControlPlaneArgv is a tenant's control plane in one process: kube-control-plane with the
// three components' own flags, each section opened by the component's name (see
// components/cmd/kube-control-plane). Each keeps its own kubeconfig, so its own identity.
func (s Spec) ControlPlaneArgv() []string {
	argv := []string{s.Bin(ControlPlaneBinary)}
	for _, section := range [][]string{s.APIServerArgv(), s.ControllerManagerArgv(), s.SchedulerArgv()} {
		argv = append(argv, filepath.Base(section[0]))
		argv = append(argv, section[1:]...)
	}
	return argv
}

// ControlPlaneBinary is the one-process control plane's binary in BinDir.
const ControlPlaneBinary = "kube-control-plane"

// RuntimeEnv is a component's whole environment when the component needs none of its own:
// the Go runtime's settings. A tenant's apiserver, alone or in the one process, collects
// garbage at half the default heap growth (GOGC=50): its heap after start is about 80 MB
// live, and at the default goal of twice that it held 26 MiB more at idle, at no idle CPU
// measured (docs/benchmarks.md). The one process goes down to GOGC=25 once its start has
// settled (KUBE_CONTROL_PLANE_IDLE_GOGC, components/cmd/kube-control-plane): 13 MiB less
// per idle cluster, at no idle CPU measured, since an idle control plane allocates little;
// through its start it would cost time. The other components' heaps are a few MB; theirs
// stays the default.
func (s Spec) RuntimeEnv(c procgroup.Component) []string {
	if s.Front {
		return nil
	}
	switch c {
	case procgroup.ComponentControlPlane:
		return []string{"GOGC=50", "KUBE_CONTROL_PLANE_IDLE_GOGC=25"}
	case procgroup.ComponentAPIServer:
		return []string{"GOGC=50"}
	}
	return nil
}

// AdmissionConfig is the tenant apiserver's admission configuration: PodSecurity
// enforces "baseline" in every namespace that sets no level of its own. It warns of
// nothing more: a warning on every pod a tenant (or the scheduler's probe) creates would
// be noise.
const AdmissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
    exemptions: {}
`

// ControllerManagerArgv listens on nothing (--secure-port=0) and signs with the cluster CA.
func (s Spec) ControllerManagerArgv() []string {
	l := s.Layout()
	return append([]string{s.Bin("kube-controller-manager")}, flags(map[string]string{
		"kubeconfig":                       l.ControllerManagerKubeconfig(),
		"secure-port":                      "0",
		"leader-elect":                     "false",
		"use-service-account-credentials":  "true",
		"service-account-private-key-file": l.ServiceAccountKey(),
		"root-ca-file":                     l.CACert(),
		"cluster-signing-cert-file":        l.CACert(),
		"cluster-signing-key-file":         l.CAKey(),
		"cluster-name":                     s.Name,
		"controllers":                      s.controllers(),
		"service-cluster-ip-range":         s.serviceCIDR(),
		"profiling":                        "false",
		// Its start makes about 40 controllers' clients, each a ServiceAccount and a
		// token request through one client (use-service-account-credentials): at the
		// default 20 requests a second (burst 30) that alone took 5 s of a fresh
		// cluster's bring-up; at these it takes under 1 s. Each controller's own client
		// gets the same limits, which are still the apiserver's to enforce (max in-flight
		// and priority and fairness), inside the tenant's own control group.
		"kube-api-qps":   "200",
		"kube-api-burst": "400",
	})...)
}

// controllers are the controller-manager's: all of them (plus the bootstrap-token ones) for
// a tenant; for the front, only namespace deletion, garbage collection, service accounts
// and ClusterRole aggregation (what the controllers gate proves runs, waitControllers).
func (s Spec) controllers() string {
	if s.Front {
		return "namespace,garbagecollector,serviceaccount,serviceaccount-token,clusterrole-aggregation"
	}
	return "*,bootstrapsigner,tokencleaner"
}

// SchedulerArgv listens on nothing.
func (s Spec) SchedulerArgv() []string {
	return append([]string{s.Bin("kube-scheduler")}, flags(map[string]string{
		"kubeconfig":   s.Layout().SchedulerKubeconfig(),
		"secure-port":  "0",
		"leader-elect": "false",
		"profiling":    "false",
	})...)
}

// ServerArgv is the k3s flavour: one "k3s server" with no agent and no cloud controller of
// its own, storing through the cluster's kine. Tested as argv only: no k3s binary can be
// had on these machines.
func (s Spec) ServerArgv() []string {
	l := s.Layout()
	return append([]string{s.K3sBinary, "server"}, flags(map[string]string{
		"disable-agent":            "true",
		"disable-cloud-controller": "true",
		"datastore-endpoint":       "unix://" + l.KineSocket(),
		"data-dir":                 l.Root + "/k3s",
		"bind-address":             s.bindAddress(),
		"advertise-address":        s.advertiseAddress(),
		"https-listen-port":        strconv.Itoa(s.APIServerPort),
		"disable":                  "traefik,servicelb,local-storage,metrics-server,coredns",
		"write-kubeconfig-mode":    "0600",
		"secrets-encryption":       "true",
	})...)
}

// DefaultCompactionInterval is the kube-apiserver's own default: history older than one to
// two intervals is gone.
const DefaultCompactionInterval = 5 * time.Minute

func (s Spec) compactionInterval() time.Duration {
	if s.CompactionInterval > 0 {
		return s.CompactionInterval
	}
	return DefaultCompactionInterval
}
