// Package nodeprovider is where the guests behind a tenant cluster's Nodes come from. Today
// it holds the one derivation of a Node's name (invariant 11); the guest interface and its
// implementations grow here.
package nodeprovider

import (
	"fmt"
	"regexp"
)

// MaxNodeIDLength keeps every node name a valid DNS-1123 label: a cluster name is at most
// 40 characters, plus "-" and the node id, at most 63.
const MaxNodeIDLength = 22

var nodeIDRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NodeName is the name of the Node that the guest nodeID of cluster registers as:
// "<cluster>-<nodeID>". It is the only derivation (invariant 11): the provider, the
// instance snapshot and the CCM's provider ID all go through it, so they cannot disagree.
func NodeName(cluster, nodeID string) (string, error) {
	if err := ValidateNodeID(nodeID); err != nil {
		return "", err
	}
	if cluster == "" {
		return "", fmt.Errorf("node %q: the cluster name is empty", nodeID)
	}
	return cluster + "-" + nodeID, nil
}

// ValidateNodeID checks a node id: 1-22 lowercase letters, digits or '-', starting and
// ending with a letter or digit.
func ValidateNodeID(nodeID string) error {
	if len(nodeID) == 0 || len(nodeID) > MaxNodeIDLength || !nodeIDRE.MatchString(nodeID) {
		return fmt.Errorf("node id %q: want 1-%d lowercase letters, digits or '-', starting and ending with a letter or digit", nodeID, MaxNodeIDLength)
	}
	return nil
}
