package cloudprovider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/instancesnapshot"
)

func node(name string, tainted bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if tainted {
		n.Spec.Taints = []corev1.Taint{{Key: UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

func instances(t *testing.T) *FileInstances {
	return &FileInstances{Path: filepath.Join(t.TempDir(), "nodes.json"), Cluster: "demo", PodsPerNode: 30}
}

func write(t *testing.T, f *FileInstances, list ...instancesnapshot.Instance) {
	t.Helper()
	if err := instancesnapshot.Write(f.Path, f.Cluster, list); err != nil {
		t.Fatal(err)
	}
}

var guestA = instancesnapshot.Instance{Cluster: "demo", Name: "demo-a", NodeID: "a", State: instancesnapshot.StateRunning,
	Addresses: []instancesnapshot.Address{{Type: "InternalIP", Address: "10.1.2.3"}}}

// Absent and "[]" are the same answer, the delete path; an unparseable file is an error.
func TestAbsentEmptyAndCorruptAsTheCCMSeesThem(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	n := node("demo-a", false)

	known, err := f.InstanceExists(ctx, n)
	if known || err != nil {
		t.Fatalf("absent: known=%v err=%v, want false, nil", known, err)
	}
	write(t, f)
	known, err = f.InstanceExists(ctx, n)
	if known || err != nil {
		t.Fatalf("[]: known=%v err=%v, want false, nil", known, err)
	}
	os.WriteFile(f.Path, []byte(`[{"cluster":"demo","name":"demo-a"`), 0o600)
	known, err = f.InstanceExists(ctx, n)
	if err == nil {
		t.Fatalf("corrupt: known=%v err=nil, want an error", known)
	}
	if _, err := f.InstanceMetadata(ctx, node("demo-a", true)); err == nil {
		t.Fatal("corrupt: InstanceMetadata answered")
	}
	if _, err := f.InstanceShutdown(ctx, n); err == nil {
		t.Fatal("corrupt: InstanceShutdown answered")
	}
	// Another cluster's snapshot is an error too, not "nothing known".
	os.WriteFile(f.Path, []byte(`[{"cluster":"other","name":"other-a","nodeID":"a","state":"running"}]`), 0o600)
	if _, err := f.InstanceExists(ctx, n); err == nil {
		t.Fatal("another cluster's snapshot was read as this one's")
	}
}

// The file is re-read on every call: nothing is cached.
func TestEveryCallRereadsTheSnapshot(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	write(t, f, guestA)
	if ok, _ := f.InstanceExists(ctx, node("demo-a", false)); !ok {
		t.Fatal("listed guest not known")
	}
	write(t, f)
	if ok, _ := f.InstanceExists(ctx, node("demo-a", false)); ok {
		t.Fatal("a removed guest is still known: the snapshot was cached")
	}
}

func TestMetadataComesFromTheRecord(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	write(t, f, guestA)
	md, err := f.InstanceMetadata(ctx, node("demo-a", true))
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "socialweb://demo/demo-a" {
		t.Errorf("providerID %q", md.ProviderID)
	}
	if md.AdditionalLabels[contract.ClusterLabel] != "demo" || md.AdditionalLabels[contract.PodsPerNodeLabel] != "30" {
		t.Errorf("labels %v", md.AdditionalLabels)
	}
	if len(md.NodeAddresses) != 1 || md.NodeAddresses[0].Type != corev1.NodeInternalIP || md.NodeAddresses[0].Address != "10.1.2.3" {
		t.Errorf("addresses %v", md.NodeAddresses)
	}
	_, err = f.InstanceMetadata(ctx, node("demo-b", true))
	if !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("unlisted guest: %v, want InstanceNotFound (wrapped)", err)
	}
}

func TestShutdownFollowsTheState(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	stopped := guestA
	stopped.State = instancesnapshot.StateStopped
	write(t, f, stopped)
	if down, err := f.InstanceShutdown(ctx, node("demo-a", false)); !down || err != nil {
		t.Fatalf("stopped guest: %v, %v", down, err)
	}
	write(t, f, guestA)
	if down, err := f.InstanceShutdown(ctx, node("demo-a", false)); down || err != nil {
		t.Fatalf("running guest: %v, %v", down, err)
	}
}

// A Node whose provider ID names another cluster or another node is never judged: an
// error, so the lifecycle controller deletes nothing.
func TestAForeignProviderIDIsAnErrorNotAnAbsence(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	write(t, f)
	for _, id := range []string{"socialweb://other/demo-a", "socialweb://demo/demo-b", "kind://x"} {
		n := node("demo-a", false)
		n.Spec.ProviderID = id
		if ok, err := f.InstanceExists(ctx, n); err == nil {
			t.Errorf("provider ID %s: exists=%v, nil; want an error", id, ok)
		}
	}
}

func TestTheQuotaIsAskedOnlyBeforeInitialization(t *testing.T) {
	ctx := context.Background()
	f := instances(t)
	write(t, f, guestA)
	asked := 0
	f.Admit = func(context.Context, *corev1.Node) error { asked++; return ErrQuotaExceeded }
	if _, err := f.InstanceMetadata(ctx, node("demo-a", true)); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("refused admission: %v", err)
	}
	if _, err := f.InstanceMetadata(ctx, node("demo-a", false)); err != nil {
		t.Fatalf("an initialized Node's address refresh was refused: %v", err)
	}
	if asked != 1 {
		t.Fatalf("quota asked %d times, want 1", asked)
	}
}

func TestQuotaDecision(t *testing.T) {
	nodes := []*corev1.Node{node("demo-a", false), node("demo-b", false), node("demo-c", true), node("demo-d", true)}
	admitted := map[string]bool{"demo-c": true, "demo-gone": true}
	holders := QuotaHolders(nodes, admitted)
	if len(holders) != 3 || admitted["demo-gone"] {
		t.Fatalf("holders %v, admitted %v: want a, b, c; a deleted Node gives its place back", holders, admitted)
	}
	if !Admits("demo-c", holders, 3) || Admits("demo-d", holders, 3) || !Admits("demo-d", holders, 4) || !Admits("demo-d", holders, 0) {
		t.Fatal("quota decision wrong")
	}
}

func TestAdminEvidence(t *testing.T) {
	if AdminEvidence([]string{"system:masters", "system:authenticated"}, nil) == "" {
		t.Error("system:masters not seen")
	}
	all := []authzv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}}
	if AdminEvidence([]string{"socialweb:tenant-admins"}, all) == "" {
		t.Error("* on * not seen")
	}
	scoped := []authzv1.ResourceRule{{Verbs: []string{"get", "patch"}, APIGroups: []string{""}, Resources: []string{"nodes"}}, {Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}
	if why := AdminEvidence([]string{"system:authenticated"}, scoped); why != "" {
		t.Errorf("scoped identity called admin: %s", why)
	}
}
