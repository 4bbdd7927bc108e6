package clusterprovider

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/frontevents"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/materialiser"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// NodesResource is the Node CRD's resource on the front.
var NodesResource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "nodes"}

// reconcileNode observes one Node object and its guest, asks materialiser.ReconcileNode,
// writes the phase (so a watcher sees Joining or Removing while it lasts), then performs
// the operation.
func (l *Loop) reconcileNode(ctx context.Context, key string) (time.Duration, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	obj, err := l.nodeLister.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n v1alpha1.Node
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &n); err != nil {
		return 0, err
	}
	o := materialiser.ObservedNode{Deleting: n.DeletionTimestamp != nil, HasFinalizer: slices.Contains(n.Finalizers, v1alpha1.NodeFinalizer), Cluster: n.Spec.Cluster}
	var owner *unstructured.Unstructured
	if cobj, err := l.lister.ByNamespace(ns).Get(n.Spec.Cluster); err == nil {
		owner = cobj.(*unstructured.Unstructured)
		if boundTo(owner) != l.Instance {
			// Another instance's cluster, or one not placed yet: its Nodes are that
			// instance's (the cluster's passes enqueue them once it runs here).
			return 0, nil
		}
		if _, named := owner.GetAnnotations()[v1alpha1.LocalNameAnnotation]; !named {
			return 0, nil // its local name is recorded first; its passes enqueue its Nodes then
		}
		o.ClusterExists, o.ClusterDeleting = true, owner.GetDeletionTimestamp() != nil
	} else if !apierrors.IsNotFound(err) {
		return 0, err
	}
	clusterKey := ns + "/" + n.Spec.Cluster
	c := l.running(clusterKey)
	// The guest, its tenant Node and providerID carry the cluster's local name.
	local := n.Spec.Cluster
	if owner != nil {
		local = localName(owner)
	}
	g, err := nodeprovider.NewGuest(local, n.Spec.NodeID)
	if err != nil {
		return 0, err // the CRD's rules make this unreachable
	}
	if c != nil {
		o.ClusterRuns = true
		list, err := c.Instances()
		if err != nil {
			return 0, err
		}
		o.Listed = slices.ContainsFunc(list, func(in instancesnapshot.Instance) bool { return in.NodeID == n.Spec.NodeID })
		if owner != nil {
			max, _, _ := unstructured.NestedInt64(owner.Object, "spec", "maxNodes")
			o.OverQuota = max > 0 && int64(len(list)) > max
		}
		if o.Listed {
			if o.Registered, o.Ready, err = c.nodeState(ctx, g.Name); err != nil {
				return 0, err
			}
		}
	}
	r := materialiser.ReconcileNode(o)
	log := l.Log.With("cluster", clusterKey, "node", n.Spec.NodeID)
	if len(r.Ops) > 0 || string(r.Phase) != n.Status.Phase {
		log.Info("reconcile node", "phase", r.Phase, "reason", r.Reason, "ops", r.Ops)
	}
	status := v1alpha1.NodeStatus{Phase: string(r.Phase), Message: r.Message}
	if o.Listed {
		status.Guest = c.guestKind(n.Spec.NodeID)
		if r.Phase == materialiser.NodeJoining && status.Message == "" {
			if err := c.guestExited(n.Spec.NodeID); err != nil {
				status.Message = err.Error()
			}
		}
	}
	if r.Phase == materialiser.NodeReady {
		status.ProviderID = contract.ProviderID(local, g.Name)
	}
	if !slices.Contains(r.Ops, materialiser.OpReleaseNode) {
		was := n.Status.Phase
		if l.writeNodeStatus(ctx, &n, status) {
			if e, ok := frontevents.ForNode(was, status.Phase, r.Reason, r.Message); ok {
				l.Events.Record(nodeObject(&n), e)
			}
		}
	}
	for _, op := range r.Ops {
		if err := l.performNode(ctx, op, &n, c, owner); err != nil {
			l.failed(log, nodeObject(&n), "node operation failed", op, err)
			status.Message = fmt.Sprintf("%s: %v", op, err)
			l.writeNodeStatus(ctx, &n, status)
			return 0, err
		}
	}
	if len(r.Ops) > 0 {
		l.queue.Add(clusterKey) // its status.nodes
		if r.Requeue == 0 && !slices.Contains(r.Ops, materialiser.OpReleaseNode) {
			r.Requeue = 10 * time.Millisecond // the world changed, not the object: look again
		}
	}
	return r.Requeue, nil
}

// running is the cluster key's process group when it is up on this provider.
func (l *Loop) running(key string) *Cluster {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.state[key]; st != nil && st.group == materialiser.GroupUp {
		return st.cluster
	}
	return nil
}

// nodeOpDeadline bounds adding or removing one guest, so that a worker is never held by it.
const nodeOpDeadline = 3 * time.Minute

func (l *Loop) performNode(ctx context.Context, op materialiser.Op, n *v1alpha1.Node, c *Cluster, owner *unstructured.Unstructured) error {
	switch op {
	case materialiser.OpAdoptNode:
		// The Cluster owns its Nodes: the front's garbage collector deletes them with it.
		owners := []metav1.OwnerReference{{APIVersion: v1alpha1.APIVersion, Kind: "Cluster", Name: owner.GetName(), UID: owner.GetUID()}}
		return l.setFinalizer(ctx, NodesResource, &n.ObjectMeta, v1alpha1.NodeFinalizer, true, map[string]any{"ownerReferences": owners})
	case materialiser.OpReleaseNode:
		return l.setFinalizer(ctx, NodesResource, &n.ObjectMeta, v1alpha1.NodeFinalizer, false, nil)
	case materialiser.OpAddGuest:
		ctx, cancel := c.whileRunning(ctx, nodeOpDeadline)
		defer cancel()
		_, err := c.StartNodeOf(ctx, n.Spec.NodeID, guestKindOf(n, owner))
		return err
	case materialiser.OpRemoveGuest:
		ctx, cancel := c.whileRunning(ctx, nodeOpDeadline)
		defer cancel()
		return c.RemoveNode(ctx, n.Spec.NodeID)
	}
	return fmt.Errorf("unknown node operation %s", op)
}

// guestKindOf is the kind of guest n asks for: its own spec.guest, else its Cluster's,
// else simulated.
func guestKindOf(n *v1alpha1.Node, owner *unstructured.Unstructured) string {
	if n.Spec.Guest != "" {
		return n.Spec.Guest
	}
	if owner != nil {
		if k, _, _ := unstructured.NestedString(owner.Object, "spec", "guest"); k != "" {
			return k
		}
	}
	return nodeprovider.KindKwok
}

// writeNodeStatus writes status when it differs, and says whether it wrote it.
func (l *Loop) writeNodeStatus(ctx context.Context, n *v1alpha1.Node, status v1alpha1.NodeStatus) bool {
	if n.Status == status {
		return false
	}
	n.Status = status
	written, err := l.updateStatus(ctx, NodesResource, n, &n.ObjectMeta)
	if err != nil {
		l.Log.Warn("node status not written", "cluster", n.Namespace+"/"+n.Spec.Cluster, "node", n.Spec.NodeID, "err", err)
	}
	return written
}

func nodeObject(n *v1alpha1.Node) frontevents.Object {
	return frontevents.Object{Kind: "Node", Namespace: n.Namespace, Name: n.Name, UID: n.UID}
}

// enqueueNodesOf queues the Node objects of the cluster ns/name: its phase decides theirs.
func (l *Loop) enqueueNodesOf(ns, name string) {
	objs, err := l.nodeIndex.ByIndex(byCluster, ns+"/"+name)
	if err != nil {
		return
	}
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			l.nodeQueue.Add(key)
		}
	}
}
