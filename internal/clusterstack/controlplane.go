package clusterstack

import (
	"strconv"

	"socialweb.computer/kcp/internal/auditlog"
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
	}
	if s.Front {
		f["allow-privileged"] = "true"
	}
	if !s.Front {
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
	})...)
}

// controllers are the controller-manager's: all of them (plus the bootstrap-token ones) for
// a tenant; for the front, only namespace deletion, garbage collection and service accounts.
func (s Spec) controllers() string {
	if s.Front {
		return "namespace,garbagecollector,serviceaccount,serviceaccount-token"
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
