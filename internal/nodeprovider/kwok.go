package nodeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// Kwok marks: kwok simulates exactly the Nodes with this annotation, so a real guest's
// Node in the same cluster is never touched by it.
const (
	KwokAnnotation      = "kwok.x-k8s.io/node"
	KwokAnnotationValue = "fake"
	// GuestLabel says what kind of guest is behind a Node.
	GuestLabel = "node.socialweb.computer/guest"
	// NodeIDLabel is the guest's node id, so that a listing names guests by NewGuest rather
	// than by taking Node names apart.
	NodeIDLabel = "node.socialweb.computer/node-id"
	// KwokLeaseSeconds is the node lease kwok holds for each Node it simulates.
	KwokLeaseSeconds = 40
)

// UninitializedTaint is what a kubelet with --cloud-provider=external registers with; the
// CCM removes it.
const UninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// KwokConfig is kwok's configuration file: its options and the stages kwok v0.8.0 ships
// as Go embeds (node/fast, node/heartbeat-with-lease, pod/fast), so the simulated kubelet
// is the one kwok's own releases test.
func KwokConfig() []byte {
	var b strings.Builder
	// kwok leaves these zero (and refuses to start) when a configuration file is given.
	b.WriteString(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 4
  nodePlayStageParallelism: 4
  podPlayStageParallelism: 4
  podsOnNodeSyncParallelism: 4
`)
	for _, stage := range []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeatWithLease, podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete} {
		b.WriteString("---\n")
		b.WriteString(strings.TrimSpace(stage))
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// RegisteredNode is the Node a simulated guest registers: what a kubelet with
// --cloud-provider=external registers (the uninitialized taint, its hostname label, its
// capacity), plus kwok's annotation. Capacity carries podsPerNode; kwok keeps it.
func RegisteredNode(g Guest, podsPerNode int) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods:   resource.MustParse(strconv.Itoa(podsPerNode)),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        g.Name,
			Labels:      map[string]string{corev1.LabelHostname: g.Name, GuestLabel: "kwok", NodeIDLabel: g.NodeID},
			Annotations: map[string]string{KwokAnnotation: KwokAnnotationValue},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: g.Name}},
		},
	}
}

// Kwok is the node provider of simulated guests for one cluster: each guest is a Node
// that the cluster's kwok process keeps Ready, as a kubelet would.
type Kwok struct {
	Cluster     string
	PodsPerNode int
	// NodeClient is a client that authenticates as the Node's own identity,
	// system:node:<name> in system:nodes, so the Node authorizer and NodeRestriction bound
	// what a guest may do, as they bound a kubelet.
	NodeClient func(name string) (kubernetes.Interface, error)
	// Reader lists the cluster's Nodes.
	Reader kubernetes.Interface
	// Start starts the cluster's kwok process when it is not running.
	Start func(ctx context.Context) error
}

// Create registers the guest's Node under the guest's own identity; an existing Node of
// that name is this guest (Create is idempotent).
func (k *Kwok) Create(ctx context.Context, g Guest) error {
	if err := k.Start(ctx); err != nil {
		return fmt.Errorf("guest %s: start kwok: %w", g.Name, err)
	}
	c, err := k.NodeClient(g.Name)
	if err != nil {
		return fmt.Errorf("guest %s: %w", g.Name, err)
	}
	_, err = c.CoreV1().Nodes().Create(ctx, RegisteredNode(g, k.PodsPerNode), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("guest %s: register its Node as system:node:%s: %w", g.Name, g.Name, err)
	}
	return nil
}

// Delete powers the guest off: kwok stops simulating it (its annotation goes) and its Node
// reports NotReady, as a Node whose VM is gone does. Deleting the Node is the CCM's part,
// once the provider has removed the guest from nodes.json. A Node already gone is no error.
func (k *Kwok) Delete(ctx context.Context, g Guest) error {
	c, err := k.NodeClient(g.Name)
	if err != nil {
		return fmt.Errorf("guest %s: %w", g.Name, err)
	}
	nodes := c.CoreV1().Nodes()
	unmanage, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{KwokAnnotation: nil}}})
	if _, err := nodes.Patch(ctx, g.Name, types.MergePatchType, unmanage, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("guest %s: stop kwok simulating it: %w", g.Name, err)
	}
	return MarkGone(ctx, c, g.Name)
}

// MarkGone reports node's Ready condition Unknown, as its vanished kubelet would no longer
// report anything; the provider repeats it while it waits for the CCM, in case a heartbeat
// was already in flight when kwok let the Node go.
func MarkGone(ctx context.Context, c kubernetes.Interface, node string) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "GuestDeleted",
		Message: "the guest behind this Node was deleted", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}}})
	_, err := c.CoreV1().Nodes().PatchStatus(ctx, node, patch)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: report it NotReady: %w", node, err)
	}
	return nil
}

// List returns the guests kwok simulates in the cluster. A failed list is an error, never
// an empty answer.
func (k *Kwok) List(ctx context.Context) ([]Guest, error) {
	nodes, err := k.Reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: GuestLabel + "=kwok"})
	if err != nil {
		return nil, fmt.Errorf("list kwok guests of %s: %w", k.Cluster, err)
	}
	var out []Guest
	for _, n := range nodes.Items {
		if n.Annotations[KwokAnnotation] != KwokAnnotationValue {
			continue // powered off, waiting for the CCM
		}
		if g, err := NewGuest(k.Cluster, n.Labels[NodeIDLabel]); err == nil && g.Name == n.Name {
			out = append(out, g)
		}
	}
	return out, nil
}
