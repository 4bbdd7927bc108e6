package cloudprovider

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/instancesnapshot"
)

// UninitializedTaint is the taint a kubelet with --cloud-provider=external registers with;
// the cloud-node controller removes it once InstanceMetadata has answered.
const UninitializedTaint = cloudproviderapi.TaintExternalCloudProvider

var _ cloudprovider.InstancesV2 = (*FileInstances)(nil)

// FileInstances is the InstancesV2 port over the instance snapshot. It re-reads the file
// on every call and caches nothing, so the CCM never acts on a guest list older than the
// provider's last write (seed D4).
//
// What each answer means for a Node:
//   - absent file or "[]": no guest is known (known=false, err=nil), the delete path for a
//     NotReady Node. The provider writes the file before the CCM starts and adds a guest
//     before it creates it (invariant 10), so a joining Node is always listed.
//   - a file that cannot be read or parsed, or that names another cluster: an error, so the
//     controllers patch nothing and delete nothing (invariant 14).
type FileInstances struct {
	Path        string
	Cluster     string
	PodsPerNode int
	// Admit, when set, is asked before an uninitialized Node is initialized (the quota).
	Admit func(ctx context.Context, node *corev1.Node) error
}

// lookup finds node's guest in a fresh read of the snapshot. A Node whose provider ID names
// anything but this cluster's node of that name is an error: it is not ours to judge.
func (f *FileInstances) lookup(node *corev1.Node) (instancesnapshot.Instance, bool, error) {
	list, err := instancesnapshot.Read(f.Path, f.Cluster)
	if err != nil {
		return instancesnapshot.Instance{}, false, err
	}
	if node.Spec.ProviderID != "" {
		if want := contract.ProviderID(f.Cluster, node.Name); node.Spec.ProviderID != want {
			return instancesnapshot.Instance{}, false, fmt.Errorf("node %s: provider ID %q is not %q; not this cluster's guest, left alone", node.Name, node.Spec.ProviderID, want)
		}
	}
	in, ok := instancesnapshot.Find(list, node.Name)
	return in, ok, nil
}

// InstanceExists reports whether the snapshot lists node's guest.
func (f *FileInstances) InstanceExists(_ context.Context, node *corev1.Node) (bool, error) {
	_, ok, err := f.lookup(node)
	return ok, err
}

// InstanceShutdown reports whether node's guest is listed as stopped. An unlisted guest is
// not shut down: whether it exists is InstanceExists's answer.
func (f *FileInstances) InstanceShutdown(_ context.Context, node *corev1.Node) (bool, error) {
	in, ok, err := f.lookup(node)
	if err != nil || !ok {
		return false, err
	}
	return in.State == instancesnapshot.StateStopped, nil
}

// InstanceMetadata is what initializes a Node: its provider ID, its addresses, the cluster
// label and the pods-per-node label. An unlisted guest is cloudprovider.InstanceNotFound
// (wrapped), so the Node stays uninitialized and is retried.
func (f *FileInstances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, ok, err := f.lookup(node)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("node %s: %w in %s", node.Name, cloudprovider.InstanceNotFound, f.Path)
	}
	if f.Admit != nil && HasUninitializedTaint(node) {
		if err := f.Admit(ctx, node); err != nil {
			return nil, err
		}
	}
	md := &cloudprovider.InstanceMetadata{
		ProviderID: contract.ProviderID(f.Cluster, node.Name),
		AdditionalLabels: map[string]string{
			contract.ClusterLabel:     f.Cluster,
			contract.PodsPerNodeLabel: strconv.Itoa(f.PodsPerNode),
		},
	}
	for _, a := range in.Addresses {
		md.NodeAddresses = append(md.NodeAddresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return md, nil
}

// HasUninitializedTaint reports whether node still waits for the CCM.
func HasUninitializedTaint(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == UninitializedTaint {
			return true
		}
	}
	return false
}
