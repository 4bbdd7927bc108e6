package guestboot

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// Config is what the provider tells a guest's init (socialweb-guest --config FILE, a 0600
// file in the guest's directory): where its state lives and how it is wired. The join
// material is not here: it is in the user data, which the guest reads as a VM would.
type Config struct {
	Name     string   // the Node's name, also the guest's hostname
	Bin      string   // directory with containerd, containerd-shim-runc-v2, ctr, kubelet, kube-proxy
	Dir      string   // the guest's directory on the host: its state and logs
	UserData string   // the #cloud-config file
	Images   []string // OCI archives imported into the guest's containerd before the kubelet starts
	// Link is the host-made veth end moved into the guest's network namespace; the guest
	// renames it eth0.
	Link    string
	Address netip.Prefix // the guest's InternalIP on its cluster's bridge
	Gateway netip.Addr   // the bridge's address on the host, where the apiserver is reached
	// PodCIDR is this guest's pods'; ClusterPodCIDR is every guest's of the cluster, which
	// is reached on the bridge: each guest answers ARP for its own pods (proxy ARP), so no
	// guest needs a route per peer.
	PodCIDR        netip.Prefix
	ClusterPodCIDR netip.Prefix
	ServiceCIDR    netip.Prefix
	// CgroupRoot is the kubelet's cgroupRoot: the guest's pods' group, below its cluster's,
	// so the cluster's limits bound its pods.
	CgroupRoot string
	MaxPods    int
}

// Read reads and checks a guest's configuration.
func Read(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate names the first field a guest cannot boot with.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("Name is empty")
	case c.Bin == "" || c.Dir == "" || c.UserData == "":
		return fmt.Errorf("Bin, Dir and UserData must all be set")
	case c.Link == "" || len(c.Link) > 15:
		return fmt.Errorf("Link %q: want an interface name of 1-15 characters", c.Link)
	case !c.Address.IsValid() || !c.Gateway.IsValid() || !c.Address.Contains(c.Gateway):
		return fmt.Errorf("Address %s and Gateway %s: want the gateway inside the guest's subnet", c.Address, c.Gateway)
	case !c.PodCIDR.IsValid() || !c.ClusterPodCIDR.IsValid() || !c.ClusterPodCIDR.Contains(c.PodCIDR.Addr()):
		return fmt.Errorf("PodCIDR %s: want it inside ClusterPodCIDR %s", c.PodCIDR, c.ClusterPodCIDR)
	case !c.ServiceCIDR.IsValid():
		return fmt.Errorf("ServiceCIDR is not set")
	}
	return nil
}

// Paths inside the guest's mount namespace.
const (
	ContainerdConfigPath = "/etc/containerd/config.toml"
	ContainerdSocket     = "/run/containerd/containerd.sock"
	KubeletConfigPath    = "/var/lib/kubelet/config.yaml"
	CNIConfigPath        = "/etc/cni/net.d/10-socialweb.conflist"
	KubeProxyConfigPath  = "/var/lib/kube-proxy/config.yaml"
	CNIBinDir            = "/usr/lib/cni" // Debian's containernetworking-plugins
	RuncBinary           = "/usr/sbin/runc"
)

// ContainerdConfig is the guest's containerd configuration (version 3, containerd 2.x).
// restrict_oom_score_adj: root on these hosts lacks CAP_SYS_RESOURCE, so runc cannot lower
// an oom_score_adj, and without it every pod sandbox fails ("can't get final child's PID
// from pipe: EOF"). The sandbox image is the project's own, never pulled.
func ContainerdConfig(sandboxImage string, systemdCgroup bool) []byte {
	return []byte(fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = "/etc/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = %t
`, ContainerdSocket, sandboxImage, CNIBinDir, RuncBinary, systemdCgroup))
}

// CNIConfig is the pods' network on the guest: a bridge (cni0) that is the pods' gateway,
// addresses from the guest's pod CIDR, and portmap for hostPort. No masquerade: pods of
// one cluster see each other's own addresses.
func CNIConfig(podCIDR netip.Prefix) []byte {
	return []byte(fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "socialweb",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, podCIDR.Masked().String()))
}

// KubeletConfig is the guest image's kubelet configuration; the user data's flags
// (/etc/default/kubelet) add the node's identity. Anonymous requests are refused and every
// other one is authorized by the apiserver (webhook), so only the apiserver's kubelet
// client (system:kubelet-api-admin) may read logs or exec.
func KubeletConfig(c Config, caFile string, cgroupV1 bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %s
podCIDR: %s
maxPods: %d
failSwapOn: false
resolvConf: /etc/resolv.conf
serializeImagePulls: false
registerNode: true
`, c.Address.Addr(), caFile, ContainerdSocket, c.CgroupRoot, c.PodCIDR.Masked(), max(c.MaxPods, 1))
	if cgroupV1 {
		// kubelet 1.35+ refuses cgroup v1 unless told it may.
		b.WriteString("failCgroupV1: false\n")
	}
	return []byte(b.String())
}

// KubeProxyConfig is the guest image's kube-proxy: iptables mode, as the Node's own
// identity (the kubelet's kubeconfig; the provider binds system:node-proxier to
// system:nodes), answering health and metrics on the guest's loopback only. maxPerCore 0
// leaves conntrack's table size, a host-wide setting, alone. masqueradeAll is for a host
// without br_netfilter, where a Service's answer from a pod on the same bridge would
// otherwise bypass the NAT that sent it there.
func KubeProxyConfig(c Config, kubeconfig string, masqueradeAll bool) []byte {
	return []byte(fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
clientConnection:
  kubeconfig: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
iptables:
  masqueradeAll: %t
`, c.Name, c.ClusterPodCIDR.Masked(), kubeconfig, masqueradeAll))
}
