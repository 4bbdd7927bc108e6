package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

// Guests is what the provider needs of a node provider, for one cluster: create a guest,
// delete it, list what exists. Each returns an error rather than an empty answer when it
// fails (invariant 14).
type Guests interface {
	Create(ctx context.Context, g nodeprovider.Guest) error
	Delete(ctx context.Context, g nodeprovider.Guest) error
	List(ctx context.Context) ([]nodeprovider.Guest, error)
}

// snapshot is the half of a Cluster that edits nodes.json.
type snapshot interface {
	PutInstance(instancesnapshot.Instance) error
	RemoveInstance(name string) error
}

// instanceOf is the nodes.json record of a freshly created guest: its InternalIP, when it
// has one, then its name.
func instanceOf(g nodeprovider.Guest) instancesnapshot.Instance {
	in := instancesnapshot.Instance{Cluster: g.Cluster, Name: g.Name, NodeID: g.NodeID, State: instancesnapshot.StateRunning}
	if g.InternalIP.IsValid() {
		in.Addresses = append(in.Addresses, instancesnapshot.Address{Type: "InternalIP", Address: g.InternalIP.String()})
	}
	in.Addresses = append(in.Addresses, instancesnapshot.Address{Type: "Hostname", Address: g.Name})
	return in
}

// placer is a node provider whose guests get an address before they exist (real guests):
// the address is in nodes.json from the start, so the CCM initializes the Node with the
// address its kubelet was given.
type placer interface {
	Place(ctx context.Context, g nodeprovider.Guest) (nodeprovider.Guest, error)
}

// addGuest lists g in nodes.json before it creates it (invariant 10), so the CCM never
// sees its Node unlisted; a creation that fails is unlisted again.
func addGuest(ctx context.Context, snap snapshot, guests Guests, g nodeprovider.Guest) (nodeprovider.Guest, error) {
	if p, ok := guests.(placer); ok && !g.InternalIP.IsValid() {
		var err error
		if g, err = p.Place(ctx, g); err != nil {
			return g, fmt.Errorf("node %s: %w", g.Name, err)
		}
	}
	if err := snap.PutInstance(instanceOf(g)); err != nil {
		return g, fmt.Errorf("node %s: list it in nodes.json: %w", g.Name, err)
	}
	if err := guests.Create(ctx, g); err != nil {
		if uerr := snap.RemoveInstance(g.Name); uerr != nil {
			return g, fmt.Errorf("node %s: %w; and unlisting it failed, so its entry stays: %v", g.Name, err, uerr)
		}
		return g, fmt.Errorf("node %s: %w", g.Name, err)
	}
	return g, nil
}

// removeGuest drains g's Node, deletes the guest, and only once the guest is gone removes
// it from nodes.json, which is what lets the CCM delete the Node. A failed drain or delete
// leaves the entry: the guest may still run.
func removeGuest(ctx context.Context, snap snapshot, guests Guests, drain func(context.Context) error, g nodeprovider.Guest) error {
	if err := drain(ctx); err != nil {
		return fmt.Errorf("node %s: drain: %w", g.Name, err)
	}
	if err := guests.Delete(ctx, g); err != nil {
		return fmt.Errorf("node %s: delete its guest (it stays in nodes.json): %w", g.Name, err)
	}
	if err := snap.RemoveInstance(g.Name); err != nil {
		return fmt.Errorf("node %s: unlist it from nodes.json: %w", g.Name, err)
	}
	return nil
}

// GuestsOf is the cluster's node provider of the given kind: kwok's simulated guests (the
// default on one machine) or real ones.
func (c *Cluster) GuestsOf(kind string) (Guests, error) {
	switch kind {
	case "", nodeprovider.KindKwok:
		return c.Guests(), nil
	case nodeprovider.KindReal:
		return c.realGuests(), nil
	}
	return nil, fmt.Errorf("guest kind %q: want %s or %s", kind, nodeprovider.KindKwok, nodeprovider.KindReal)
}

// guestsFor is the provider of the existing guest nodeID: real when it has a guest
// directory, else simulated.
func (c *Cluster) guestsFor(nodeID string) Guests {
	if r := c.realGuests(); r.Has(nodeID) {
		return r
	}
	return c.Guests()
}

// Guests is the cluster's provider of simulated (kwok) guests.
func (c *Cluster) Guests() Guests {
	return &nodeprovider.Kwok{
		Cluster: c.Name, PodsPerNode: c.podsPerNode(), Reader: c.admin,
		NodeClient: func(name string) (kubernetes.Interface, error) { return nodeClient(c.Spec, name) },
		Start:      c.startNodeGroup,
	}
}

func (c *Cluster) podsPerNode() int {
	if c.Spec.PodsPerNode > 0 {
		return c.Spec.PodsPerNode
	}
	return DefaultPodsPerNode
}

// DefaultPodsPerNode is the CCM's default, the kubelet's maxPods.
const DefaultPodsPerNode = 110

// AddNode adds the simulated guest nodeID to the cluster and, unless ctx ends first, waits
// until its Node is Ready and initialized by the CCM.
func (c *Cluster) AddNode(ctx context.Context, nodeID string) (nodeprovider.Guest, error) {
	return c.AddNodeOf(ctx, nodeID, nodeprovider.KindKwok)
}

// AddNodeOf is AddNode for a guest of the given kind.
func (c *Cluster) AddNodeOf(ctx context.Context, nodeID, kind string) (nodeprovider.Guest, error) {
	g, err := c.StartNodeOf(ctx, nodeID, kind)
	if err != nil {
		return g, err
	}
	err = poll(ctx, "node "+g.Name+" Ready and initialized", func(ctx context.Context) (bool, error) {
		if err := c.guestExited(nodeID); err != nil {
			return false, permanentError{err}
		}
		_, ready, err := c.nodeState(ctx, g.Name)
		return ready, err
	})
	if err != nil && kind == nodeprovider.KindReal {
		// A real guest that never joined is taken away again: nothing of it is left.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, rerr := c.retireGuest(rctx, nodeID); rerr != nil {
			err = fmt.Errorf("%w; and removing the guest again failed: %v", err, rerr)
		}
	}
	return g, err
}

// StartNode lists the guest nodeID and creates it (idempotent), without waiting for its
// Node: the reconcile loop observes that on its next passes rather than hold a worker.
func (c *Cluster) StartNode(ctx context.Context, nodeID string) (nodeprovider.Guest, error) {
	return c.StartNodeOf(ctx, nodeID, nodeprovider.KindKwok)
}

// StartNodeOf is StartNode for a guest of the given kind.
func (c *Cluster) StartNodeOf(ctx context.Context, nodeID, kind string) (nodeprovider.Guest, error) {
	g, err := nodeprovider.NewGuest(c.Name, nodeID)
	if err != nil {
		return g, err
	}
	guests, err := c.GuestsOf(kind)
	if err != nil {
		return g, err
	}
	return addGuest(ctx, c, guests, g)
}

// nodeState reports whether the Node name is registered, and whether it is Ready and
// initialized by the CCM with the provider ID it derives.
func (c *Cluster) nodeState(ctx context.Context, name string) (registered, ready bool, err error) {
	n, err := c.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, NodeReady(n) && n.Spec.ProviderID == contract.ProviderID(c.Name, n.Name), nil
}

// RemoveNode drains the guest nodeID's Node, deletes the guest, unlists it, and waits
// until the CCM has deleted its Node.
func (c *Cluster) RemoveNode(ctx context.Context, nodeID string) error {
	g, err := c.retireGuest(ctx, nodeID)
	if err != nil {
		return err
	}
	nc, err := nodeClient(c.Spec, g.Name)
	if err != nil {
		return err
	}
	err = poll(ctx, "node "+g.Name+" deleted by the CCM", func(ctx context.Context) (bool, error) {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, g.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if NodeReady(n) { // a heartbeat kwok had in flight when it let the Node go
			return false, nodeprovider.MarkGone(ctx, nc, g.Name)
		}
		return false, errors.New("still there, NotReady")
	})
	if err != nil {
		return err
	}
	return c.reapIdleNodeGroup()
}

// reapIdleNodeGroup reaps the node group (kwok) once no simulated guest is listed. kwok
// remembers the Nodes it played: a real guest that takes the name of one (a simulated node
// replaced by a real one) had its pods played Running by kwok too, which its kubelet then
// found without containers and failed. A cluster without simulated guests runs no kwok;
// startNodeGroup starts one again for the next.
func (c *Cluster) reapIdleNodeGroup() error {
	real := c.realGuests() // before nodesMu, which it takes
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	if c.nodes == nil {
		return nil
	}
	// A guest is listed before it is created (invariant 10): a simulated one being added
	// now is listed already, or its start waits on nodesMu and finds no node group.
	list, err := c.Instances()
	if err != nil {
		return err
	}
	if slices.ContainsFunc(list, func(in instancesnapshot.Instance) bool { return !real.Has(in.NodeID) }) {
		return nil
	}
	nodes := c.nodes
	c.nodes = nil
	return nodes.Reap()
}

// retireGuest drains the guest nodeID's Node, deletes the guest and unlists it, without
// waiting for the CCM: what a cluster's teardown needs, since its Nodes go with its data.
func (c *Cluster) retireGuest(ctx context.Context, nodeID string) (nodeprovider.Guest, error) {
	g, err := nodeprovider.NewGuest(c.Name, nodeID)
	if err != nil {
		return g, err
	}
	drain := func(ctx context.Context) error { return c.drain(ctx, g.Name) }
	return g, removeGuest(ctx, c, c.guestsFor(nodeID), drain, g)
}

// NodeReady reports whether n's Ready condition is True and the CCM's taint is gone.
func NodeReady(n *corev1.Node) bool {
	if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodeprovider.UninitializedTaint }) {
		return false
	}
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// kwokReady is how kwok says its node controller watches (its log is JSON lines).
const kwokReady = `"msg":"Watch nodes"`

// startNodeGroup starts the cluster's kwok, once: a group of its own, so a cluster without
// simulated guests runs none, reaped by Stop before the control plane.
func (c *Cluster) startNodeGroup(ctx context.Context) error {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	if c.nodes != nil {
		return nil
	}
	if c.guestsClosed {
		// Stop has taken the node group it knew of, or found none: a kwok started now
		// would outlive its cluster.
		return fmt.Errorf("cluster %s is stopping", c.Name)
	}
	s := c.Spec
	sp, err := s.Argv(procgroup.ComponentKwok)
	if err != nil {
		return err
	}
	spec := componentSpec(s, procgroup.ComponentKwok, sp)
	ready := newLogLine(spec.LogFile, kwokReady)
	step := procgroup.Step{
		Name: procgroup.ComponentKwok,
		Spec: spec,
		Prepare: all(
			bootstrapKwokRBAC(c.admin),
			func(context.Context) error {
				if err := atomicfile.WriteFile(s.Layout().KwokConfig(), nodeprovider.KwokConfig(), 0o600); err != nil {
					return err
				}
				return c.as.own(s)
			},
		),
		Ready:        ready.wait,
		Live:         connected(s.APIServerPort),
		ReadyTimeout: kwokReadyTimeout,
	}
	step.Spec.User = c.as.components()
	if c.cgroup != nil {
		// The node group's own group, below the cluster's: bounded by the cluster's
		// limits, its usage told apart from the control plane's.
		nodes := c.p.cfg.Cgroups.Group(c.Name, "nodes")
		if err := nodes.Create(cgroups.Limits{}); err != nil {
			return fmt.Errorf("cluster %s: node group: %w", c.Name, err)
		}
		step.Spec.Cgroup = nodes
	}
	opts := c.p.nodeGroupOptions(s)
	opts.Inputs = c.inputs
	// The kwok an earlier run left is adopted when it proves itself and is current; any
	// other is reaped by Spawn (its simulated nodes are only its state in the apiserver).
	if g, a, err := procgroup.Adopt(ctx, opts, []procgroup.Step{step}); err == nil {
		if len(a.Stale) == 0 {
			c.nodes = g
			c.watch(g)
			return nil
		}
		g.Reap()
	}
	g, err := procgroup.Spawn(ctx, opts, []procgroup.Step{step})
	if err != nil {
		return fmt.Errorf("cluster %s: node group: %w", c.Name, err)
	}
	c.nodes = g
	c.watch(g)
	return nil
}

const kwokReadyTimeout = 30 * time.Second
