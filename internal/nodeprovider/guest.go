package nodeprovider

// Guest is the machine behind one Node of a tenant cluster: a simulated kwok node on a
// single host, a VM from the compute market in production.
type Guest struct {
	Cluster string
	NodeID  string
	Name    string // the Node's name: NodeName(Cluster, NodeID)
}

// NewGuest names the guest nodeID of cluster through NodeName, the one derivation.
func NewGuest(cluster, nodeID string) (Guest, error) {
	name, err := NodeName(cluster, nodeID)
	if err != nil {
		return Guest{}, err
	}
	return Guest{Cluster: cluster, NodeID: nodeID, Name: name}, nil
}
