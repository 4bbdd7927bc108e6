// Package instancesnapshot is the format of <DataDir>/nodes.json: the provider's list of the
// guests behind a tenant cluster's Nodes. The provider is its only writer (invariant 10) and
// writes it atomically (invariant 5); the cloud controller manager re-reads it on every call.
//
// The file is a JSON array of Instance records. An absent file and "[]" both mean "no
// guests": the delete path. A file that exists and cannot be parsed, or whose records name
// another cluster or a node name that NodeName does not derive, is an error, never an empty
// list (invariant 14).
package instancesnapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// State is a guest's power state.
type State string

const (
	StateRunning State = "running"
	// StateStopped is a guest that exists but is shut down: its Node gets the shutdown taint
	// and is not deleted.
	StateStopped State = "stopped"
)

// Address types, as corev1.NodeAddressType spells them.
var addressTypes = map[string]bool{"Hostname": true, "InternalIP": true, "ExternalIP": true, "InternalDNS": true, "ExternalDNS": true}

// Address is one of a guest's addresses.
type Address struct {
	Type    string `json:"type"` // Hostname, InternalIP, ExternalIP, InternalDNS or ExternalDNS
	Address string `json:"address"`
}

// Instance is one guest.
type Instance struct {
	Cluster   string    `json:"cluster"`
	Name      string    `json:"name"` // the Node's name: nodeprovider.NodeName(Cluster, NodeID)
	NodeID    string    `json:"nodeID"`
	Addresses []Address `json:"addresses,omitempty"`
	State     State     `json:"state"`
}

// Parse decodes and checks a snapshot of cluster. Any bad record makes the whole snapshot
// an error: a partial reading could delete the Nodes of the records it dropped.
func Parse(b []byte, cluster string) ([]Instance, error) {
	var list []Instance
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("not a JSON array of instances: %w", err)
	}
	if list == nil { // "null" is not "[]": the provider never writes it
		return nil, errors.New(`not a JSON array of instances: got null`)
	}
	if err := Validate(list, cluster); err != nil {
		return nil, err
	}
	return list, nil
}

// Validate checks every record of a snapshot of cluster.
func Validate(list []Instance, cluster string) error {
	seen := map[string]bool{}
	for i, in := range list {
		if in.Cluster != cluster {
			return fmt.Errorf("instance %d (%q): cluster is %q, this snapshot belongs to cluster %q", i, in.Name, in.Cluster, cluster)
		}
		want, err := nodeprovider.NodeName(cluster, in.NodeID)
		if err != nil {
			return fmt.Errorf("instance %d: nodeID: %w", i, err)
		}
		if in.Name != want {
			return fmt.Errorf("instance %d: name is %q, NodeName(%q, %q) is %q", i, in.Name, cluster, in.NodeID, want)
		}
		if seen[in.Name] {
			return fmt.Errorf("instance %d: name %q is listed twice", i, in.Name)
		}
		seen[in.Name] = true
		if in.State != StateRunning && in.State != StateStopped {
			return fmt.Errorf("instance %d (%q): state is %q, want %q or %q", i, in.Name, in.State, StateRunning, StateStopped)
		}
		for _, a := range in.Addresses {
			if !addressTypes[a.Type] {
				return fmt.Errorf("instance %d (%q): address type %q is not one of Hostname, InternalIP, ExternalIP, InternalDNS, ExternalDNS", i, in.Name, a.Type)
			}
			if a.Type == "InternalIP" || a.Type == "ExternalIP" {
				if _, err := netip.ParseAddr(a.Address); err != nil {
					return fmt.Errorf("instance %d (%q): %s address %q: %w", i, in.Name, a.Type, a.Address, err)
				}
			}
		}
	}
	return nil
}

// Read reads the snapshot at path. An absent file is (nil, nil): no guests. Every other
// failure is an error naming the file.
func Read(path, cluster string) ([]Instance, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("instance snapshot %s: %w", path, err)
	}
	list, err := Parse(b, cluster)
	if err != nil {
		return nil, fmt.Errorf("instance snapshot %s: %w", path, err)
	}
	return list, nil
}

// Write replaces the snapshot at path atomically (0600). It refuses a list that Parse
// would refuse, so the provider cannot write what the CCM must reject.
func Write(path, cluster string, list []Instance) error {
	if list == nil {
		list = []Instance{}
	}
	if err := Validate(list, cluster); err != nil {
		return fmt.Errorf("instance snapshot %s: %w", path, err)
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// Find returns the instance named name.
func Find(list []Instance, name string) (Instance, bool) {
	for _, in := range list {
		if in.Name == name {
			return in, true
		}
	}
	return Instance{}, false
}
