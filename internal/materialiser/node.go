package materialiser

import (
	"fmt"
	"time"

	"socialweb.computer/kcp/api/v1alpha1"
)

// NodePhase is a Node's status.phase.
type NodePhase string

const (
	NodePending  NodePhase = v1alpha1.NodePhasePending  // its cluster does not run (yet)
	NodeJoining  NodePhase = v1alpha1.NodePhaseJoining  // the guest is being created and awaited
	NodeReady    NodePhase = v1alpha1.NodePhaseReady    // listed, Ready and initialized by the CCM
	NodeRemoving NodePhase = v1alpha1.NodePhaseRemoving // drained, deleted, unlisted
)

// Node operations.
const (
	OpAdoptNode   Op = "AdoptNode"   // the finalizer, and the Cluster as owner (garbage collection)
	OpAddGuest    Op = "AddGuest"    // Cluster.AddNode: listed, created, awaited
	OpRemoveGuest Op = "RemoveGuest" // Cluster.RemoveNode: drained, deleted, unlisted
	OpReleaseNode Op = "ReleaseNode" // the Node's finalizer goes
)

// How often a Node looks again while it waits: for its cluster to run (when deleted), or
// for its guest's Node to register and be initialized.
const (
	NodeWaitForRun = 5 * time.Second
	NodeJoinPoll   = 100 * time.Millisecond
)

// ObservedNode is one Node object and the guest behind it, as the loop saw them.
type ObservedNode struct {
	Deleting     bool
	HasFinalizer bool
	Cluster      string // spec.cluster

	ClusterExists   bool // a Cluster of that name is in the Node's namespace
	ClusterDeleting bool
	ClusterRuns     bool // its process group is up on this provider

	// Known only when ClusterRuns.
	Listed     bool // the guest is in nodes.json
	Registered bool // its Node exists in the tenant cluster
	Ready      bool // its Node is Ready, initialized by the CCM, with its provider ID
	OverQuota  bool // the cluster lists more guests than its maxNodes
}

// NodeResult is what to do with one Node.
type NodeResult struct {
	Phase   NodePhase
	Reason  string
	Message string
	Ops     []Op
	Requeue time.Duration
}

// ReconcileNode decides for one Node. A guest is only ever added to or removed from a
// cluster that runs here; a Node whose cluster is gone lets its finalizer go, since the
// Cluster's own teardown removes every guest it lists.
func ReconcileNode(o ObservedNode) NodeResult {
	if o.Deleting {
		switch {
		case !o.HasFinalizer:
			return NodeResult{Phase: NodeRemoving, Reason: "Removed"}
		case !o.ClusterExists || o.ClusterDeleting:
			return NodeResult{Phase: NodeRemoving, Reason: "ClusterGone", Message: "the cluster's teardown removes the guest", Ops: []Op{OpReleaseNode}}
		case !o.ClusterRuns:
			return NodeResult{Phase: NodeRemoving, Reason: "WaitingForCluster",
				Message: fmt.Sprintf("cluster %s does not run; the guest is removed once it does", o.Cluster), Requeue: NodeWaitForRun}
		case o.Listed:
			return NodeResult{Phase: NodeRemoving, Reason: "Removing", Message: "draining the node and deleting its guest", Ops: []Op{OpRemoveGuest}}
		}
		return NodeResult{Phase: NodeRemoving, Reason: "Removed", Message: "the guest is gone", Ops: []Op{OpReleaseNode}}
	}
	switch {
	case !o.ClusterExists:
		return NodeResult{Phase: NodePending, Reason: "ClusterGone", Message: fmt.Sprintf("no Cluster %s in this namespace", o.Cluster)}
	case o.ClusterDeleting:
		return NodeResult{Phase: NodePending, Reason: "ClusterDeleting", Message: fmt.Sprintf("cluster %s is being deleted", o.Cluster)}
	case !o.HasFinalizer:
		return NodeResult{Phase: NodePending, Reason: "Adopting", Message: "adding the teardown finalizer", Ops: []Op{OpAdoptNode}}
	case !o.ClusterRuns:
		return NodeResult{Phase: NodePending, Reason: "WaitingForCluster", Message: fmt.Sprintf("cluster %s is not Ready", o.Cluster)}
	case o.Listed && o.Ready:
		return NodeResult{Phase: NodeReady, Reason: "Ready", Message: "Ready and initialized by the cloud controller manager"}
	case o.Listed && o.Registered && o.OverQuota:
		// The CCM keeps a Node past the quota tainted: it waits here, and says why.
		return NodeResult{Phase: NodeJoining, Reason: "OverQuota", Requeue: NodeJoinPoll,
			Message: "registered; the cluster has more nodes than its maxNodes, so the cloud controller manager leaves it uninitialized until one goes"}
	case o.Listed && o.Registered:
		return NodeResult{Phase: NodeJoining, Reason: "Initializing", Requeue: NodeJoinPoll, Message: "registered; the cloud controller manager is initializing it"}
	case o.Listed:
		return NodeResult{Phase: NodeJoining, Reason: "Registering", Message: "the guest is starting; waiting for its Node to register", Requeue: NodeJoinPoll}
	}
	return NodeResult{Phase: NodeJoining, Reason: "Joining", Message: "listing and creating the guest", Ops: []Op{OpAddGuest}}
}
