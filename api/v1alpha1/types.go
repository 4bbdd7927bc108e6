// Package v1alpha1 is the declared state the cluster provider materialises, group
// socialweb.computer: a Cluster (a tenant control plane) and a Node (a guest of one). The
// CRDs in crds/ validate them with OpenAPI and CEL, so bad names and values are refused by
// the front with a message naming the field (invariant 18) before the provider sees them.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Group and version.
const (
	Group      = "socialweb.computer"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version

	// TeardownFinalizer keeps a deleted Cluster until its teardown is complete.
	TeardownFinalizer = "cluster.socialweb.computer/teardown"
	// NodeFinalizer keeps a deleted Node until its guest is gone.
	NodeFinalizer = "node.socialweb.computer/teardown"
	// InstanceLabel binds a Cluster to the provider instance that runs it: set once, by
	// that instance, in a write that carries the Cluster's resourceVersion, so two
	// instances never both bind one Cluster. Only the bound instance touches it.
	InstanceLabel = "socialweb.computer/instance"
	// EpochAnnotation counts a Cluster's bindings: each bind (to an instance, then on
	// each takeover by another) raises it in the same write. An external datastore is
	// taken at it and refuses an older one, so an instance that lost the Cluster cannot
	// take its datastore back.
	EpochAnnotation = "socialweb.computer/epoch"
	// LocalNameAnnotation is a Cluster's local name (internal/localname): unique on the
	// front, where its own name is unique only in its namespace. Its DataDir, port, OS
	// user, node names and providerIDs carry it. Recorded at its first bind, never changed.
	LocalNameAnnotation = "socialweb.computer/local-name"
)

// HoldingInstance is the instance whose slot a Cluster with these labels and this
// status.instance holds: the one it is bound to, else, while it is unbound (its label
// taken off, or not yet written back after a failover), the one its status names, where
// it is bound back (its local data is there); else none. Placement and `socialweb-kcp
// hosts` count with it, so the two never disagree on how full an instance is.
func HoldingInstance(labels map[string]string, statusInstance string) string {
	if b := labels[InstanceLabel]; b != "" {
		return b
	}
	return statusInstance
}

// Cluster phases (status.phase).
const (
	PhasePending      = "Pending" // no instance has taken it yet (condition Ready says why)
	PhaseInitializing = "Initializing"
	PhaseReady        = "Ready"
	PhaseUnavailable  = "Unavailable"
	PhaseDraining     = "Draining"
	PhaseSleeping     = "Sleeping"
)

// Node phases (status.phase).
const (
	NodePhasePending  = "Pending"
	NodePhaseJoining  = "Joining"
	NodePhaseReady    = "Ready"
	NodePhaseRemoving = "Removing"
)

// Cluster is one tenant control plane.
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec   `json:"spec"`
	Status            ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec is what the operator declares.
type ClusterSpec struct {
	// Account owns the cluster; immutable.
	Account string `json:"account"`
	// Running false parks the cluster: processes stopped, data kept. Default true.
	Running *bool `json:"running,omitempty"`
	// MaxNodes is the node quota the CCM enforces; 0 is none.
	MaxNodes int32 `json:"maxNodes,omitempty"`
	// PodsPerNode is published on each Node; default 110.
	PodsPerNode int32 `json:"podsPerNode,omitempty"`
	// SleepAfter, when set, sleeps the cluster after that long without a request through
	// the front door (processes stopped, port released, data kept); the first request
	// wakes it. Unset: the provider's default (serve --sleep-after), off unless given.
	SleepAfter *metav1.Duration `json:"sleepAfter,omitempty"`
	// CreateAsleep, with sleep on, declares the cluster asleep: its identity and tenant
	// kubeconfig are minted at once, but its datastore is initialised, and its processes
	// started, only by the first request through the front door. A cluster declared for
	// later then costs a few kilobytes of disk and no process. Without sleep it is ignored.
	CreateAsleep bool `json:"createAsleep,omitempty"`
	// Resources bound the cluster's processes together (its datastore, control plane and
	// simulated nodes) in a control group of its own; an unset field takes the provider's
	// default (serve --cluster-memory, --cluster-cpu, --cluster-pids). A change applies
	// at the cluster's next start.
	Resources *ClusterResources `json:"resources,omitempty"`
	// ExtraNames are DNS names the cluster answers to at the front door besides
	// <name>.<base-domain>, such as a vanity domain the tenant points at the host: routed
	// by the front door and carried by the apiserver's serving certificate. A name under
	// the base domain, or one an older Cluster claims, is refused with a condition.
	ExtraNames []string `json:"extraNames,omitempty"`
	// Guest is the kind of guest its Nodes get when theirs is unset: "kwok" (the default)
	// or "real".
	Guest string `json:"guest,omitempty"`
	// Placement narrows where the cluster may run; unset: the instance with the most room.
	Placement *ClusterPlacement `json:"placement,omitempty"`
	// Datastore is where the cluster's data lives: "local" (the default: a PostgreSQL of
	// its own on its instance's host, which pins it there) or "external" (a database on the
	// PostgreSQL server its instances share, serve --external-datastore: when its instance
	// is lost, another brings it up with its data). Immutable.
	Datastore string `json:"datastore,omitempty"`
}

// Datastore flavours (spec.datastore).
const (
	DatastoreLocal    = "local"
	DatastoreExternal = "external"
)

// ClusterPlacement is where a Cluster may be placed.
type ClusterPlacement struct {
	// Instance names the one provider instance (serve --instance) that may take it; the
	// Cluster waits, Pending with a reason, while that instance is full or gone.
	Instance string `json:"instance,omitempty"`
}

// ClusterResources are a cluster's limits, as Kubernetes quantities.
type ClusterResources struct {
	Memory string `json:"memory,omitempty"` // such as 1Gi: page cache included
	CPU    string `json:"cpu,omitempty"`    // such as 500m: CPU time per period
	Pids   int64  `json:"pids,omitempty"`   // processes and threads
	// Objects caps the objects the cluster stores (events and leases aside): at the cap
	// the tenant's creates are refused, with a message that says so, until it deletes.
	Objects int64 `json:"objects,omitempty"`
}

// ClusterStatus is what the provider reports, through the status subresource.
type ClusterStatus struct {
	Phase      string             `json:"phase,omitempty"`
	URL        string             `json:"url,omitempty"`
	Instance   string             `json:"instance,omitempty"` // which provider runs it
	Nodes      int32              `json:"nodes"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastActive is when the cluster last had a request through the front door, written
	// when it falls asleep.
	LastActive *metav1.Time `json:"lastActive,omitempty"`
	// LastWake is how long its last wake took, from the first request held to Ready.
	LastWake string `json:"lastWake,omitempty"`
	// CertificatesIssued is when its oldest leaf certificate was minted: after a renewal,
	// the renewal's time (socialweb-kcp certs rotate waits for it).
	CertificatesIssued *metav1.Time `json:"certificatesIssued,omitempty"`
	// CertificatesExpire is when its soonest leaf certificate expires; the provider renews
	// it well before (serve --cert-renew-share).
	CertificatesExpire *metav1.Time `json:"certificatesExpire,omitempty"`
}

// Node is one guest of a Cluster.
type Node struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeSpec   `json:"spec"`
	Status            NodeStatus `json:"status,omitempty"`
}

// NodeSpec names the guest: its cluster (in the same namespace) and its node id; both
// immutable. The Node's name, on the front as in the tenant cluster, is
// nodeprovider.NodeName(cluster, nodeID): the CRD refuses any other, so one guest has one
// Node object.
type NodeSpec struct {
	Cluster string `json:"cluster"`
	NodeID  string `json:"nodeID"`
	// Guest is what runs the Node: "kwok" (simulated: nothing runs) or "real" (a kubelet
	// and containerd in namespaces of the host, running real containers). Unset takes
	// the Cluster's spec.guest; immutable.
	Guest string `json:"guest,omitempty"`
}

// NodeStatus is what the provider reports.
type NodeStatus struct {
	Phase      string `json:"phase,omitempty"`      // Pending, Joining, Ready, Removing
	Message    string `json:"message,omitempty"`    // why it is in that phase
	Guest      string `json:"guest,omitempty"`      // what runs it: "kwok" (simulated) or "real"
	ProviderID string `json:"providerID,omitempty"` // the CCM's, once Ready
}

// Object is a Cluster or Node named name with spec, untyped, as a dynamic client creates it.
func Object(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion, "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec,
	}}
}
