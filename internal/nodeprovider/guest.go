package nodeprovider

import "net/netip"

// Guest is the machine behind one Node of a tenant cluster: a simulated kwok node on a
// single host, a VM from the compute market in production.
type Guest struct {
	Cluster string
	NodeID  string
	Name    string // the Node's name: NodeName(Cluster, NodeID)
	// InternalIP is the guest's address, when it has one of its own (a real guest): its
	// nodes.json entry carries it, so the CCM gives the Node the address its kubelet
	// was told (--node-ip) and the apiserver reaches the kubelet there.
	InternalIP netip.Addr
}

// Kinds of guest.
const (
	KindKwok = "kwok" // simulated: a Node kwok keeps Ready; nothing runs
	KindReal = "real" // namespaces on this host with containerd, a kubelet and kube-proxy
)

// NewGuest names the guest nodeID of cluster through NodeName, the one derivation.
func NewGuest(cluster, nodeID string) (Guest, error) {
	name, err := NodeName(cluster, nodeID)
	if err != nil {
		return Guest{}, err
	}
	return Guest{Cluster: cluster, NodeID: nodeID, Name: name}, nil
}
