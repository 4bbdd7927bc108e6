// Package contract is what the cluster provider and the cloud controller manager agree on:
// the CCM's environment, its readiness line, the provider ID format and the labels it puts
// on Nodes. It has no dependencies, so the provider can speak the contract without linking
// k8s.io/cloud-provider.
package contract

import (
	"fmt"
	"strings"
)

// ProviderName is the cloud provider's name (--cloud-provider).
const ProviderName = "socialweb"

// The CCM's environment (seed plan 0003). Secrets never travel on argv (invariant 3): the
// CCM takes no arguments at all.
const (
	EnvPrefix = "SOCIALWEB_CLOUDCONTROLLERMANAGER_"
	// EnvTenantKubeconfig is the path of the CCM's own scoped kubeconfig for the tenant
	// apiserver (never the admin one: invariant 20).
	EnvTenantKubeconfig = EnvPrefix + "TENANT_KUBECONFIG"
	// EnvCluster is the tenant cluster's name; it is in every provider ID.
	EnvCluster = EnvPrefix + "CLUSTER"
	// EnvInstancesFile is the instance snapshot, <DataDir>/nodes.json.
	EnvInstancesFile = EnvPrefix + "INSTANCES_FILE"
	// EnvMaxNodes (optional) is the quota: at most this many Nodes are initialized.
	EnvMaxNodes = EnvPrefix + "MAX_NODES"
	// EnvPodsPerNode (optional) is published on every Node the CCM initializes.
	EnvPodsPerNode = EnvPrefix + "PODS_PER_NODE"
	// EnvResync (optional, a Go duration) is how often Nodes are re-checked against the snapshot.
	EnvResync = EnvPrefix + "RESYNC"
)

// Labels the CCM puts on every Node it initializes.
const (
	ClusterLabel     = "node.socialweb.computer/cluster"
	PodsPerNodeLabel = "node.socialweb.computer/pods-per-node"
)

// ReadyLine is the one line the CCM prints on stdout once its informers have synced; the
// provider's readiness gate for the CCM step waits for it.
func ReadyLine(cluster string) string {
	return "socialweb-cloud-controller-manager: ready: cluster " + cluster + ": informers synced"
}

const providerIDScheme = ProviderName + "://"

// ProviderID is the spec.providerID of a Node: socialweb://<cluster>/<node-name>.
func ProviderID(cluster, node string) string { return providerIDScheme + cluster + "/" + node }

// ParseProviderID splits a provider ID made by ProviderID.
func ParseProviderID(id string) (cluster, node string, err error) {
	rest, ok := strings.CutPrefix(id, providerIDScheme)
	if !ok {
		return "", "", fmt.Errorf("provider ID %q: not of the form %s<cluster>/<node>", id, providerIDScheme)
	}
	cluster, node, ok = strings.Cut(rest, "/")
	if !ok || cluster == "" || node == "" || strings.Contains(node, "/") {
		return "", "", fmt.Errorf("provider ID %q: not of the form %s<cluster>/<node>", id, providerIDScheme)
	}
	return cluster, node, nil
}
