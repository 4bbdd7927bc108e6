package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/backup"
)

// A cluster whose datastore is external may come up on any instance: its data is on the
// shared server, and its identity (both CAs, the service-account pair, the encryption
// key, identity.json: backup.IdentityFiles) in a Secret <cluster>-identity on the front,
// beside its kubeconfig, written once by the instance that minted it and read by every
// instance that brings it up afterwards, before it mints the leaves (from the same CA). So
// an instance that takes it over after its host was lost serves the same cluster: its
// tenants' credentials and service-account tokens stay valid, and the identity guard
// finds its own identity in the datastore. Leaves and kubeconfigs are minted by each
// instance for itself, naming its own port.

func identitySecret(cluster string) string { return cluster + "-identity" }

// secretKey is an identity file's name as a Secret key ("/" is not allowed there).
func secretKey(file string) string { return strings.ReplaceAll(file, "/", ".") }

// carryIdentity, for an external cluster, places the identity the front keeps for it in
// its DataDir before a bring-up, when the DataDir has none (a first bring-up on this
// instance, such as after a failover). The first bring-up anywhere finds no Secret and
// mints one; KeepIdentity keeps it before the datastore is taken. A DataDir here of
// another Cluster of the name (one deleted while this host was away) is a stale copy: it
// goes first.
func (l *Loop) carryIdentity(ctx context.Context, ns, name string, np NodePolicy) error {
	if np.ExternalUID == "" {
		return nil
	}
	uidFile := l.P.tenantSpec(name).Layout().ClusterUID()
	if exists(l.P.DataDir(name)) && !l.P.HasDatastore(name) {
		// A DataDir says whose copy it is once its identity is kept (saveIdentity) or
		// placed (below); one that does not say is this Cluster's, cut short before.
		if b, err := os.ReadFile(uidFile); err == nil && string(b) != np.ExternalUID {
			l.Log.Info("a DataDir of another Cluster of the name is here: removed", "cluster", ns+"/"+name)
			if err := l.P.RemoveDataDir(name); err != nil {
				return err
			}
		}
	}
	sec, err := l.Core.CoreV1().Secrets(ns).Get(ctx, identitySecret(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster %s: read its identity from the front: %w", name, err)
	}
	if uid := sec.Annotations[clusterUIDAnnotation]; uid != np.ExternalUID {
		// A Secret of an earlier Cluster of the name: not this cluster's identity.
		return fmt.Errorf("cluster %s: Secret %s/%s is of Cluster uid %q, not this one (%s): delete it", name, ns, sec.Name, uid, np.ExternalUID)
	}
	files := map[string][]byte{}
	for f := range backup.IdentityFiles(l.P.tenantSpec(name).Layout()) {
		b, ok := sec.Data[secretKey(f)]
		if !ok {
			return fmt.Errorf("cluster %s: Secret %s/%s lacks %s", name, ns, sec.Name, secretKey(f))
		}
		files[f] = b
	}
	if err := l.P.PlaceIdentity(name, files); err != nil {
		return err
	}
	return atomicfile.WriteFile(uidFile, []byte(np.ExternalUID), 0o600)
}

// clusterUIDAnnotation on the identity Secret names the Cluster it is the identity of.
const clusterUIDAnnotation = "socialweb.computer/cluster-uid"

// KeepIdentity is the provider's Config.KeepIdentity: the identity of the external cluster
// named cluster, of the Cluster whose front uid is uid, kept on the front before its
// datastore is taken. A Cluster of the name with another uid (deleted and made again
// during the bring-up) is not this one: nothing is kept for it.
func (l *Loop) KeepIdentity(ctx context.Context, cluster, uid string) error {
	named, err := l.clusterIndex.ByIndex(byName, cluster)
	if err != nil {
		return err
	}
	for _, o := range named {
		u := o.(*unstructured.Unstructured)
		if string(u.GetUID()) != uid {
			continue
		}
		var cl v1alpha1.Cluster
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cl); err != nil {
			return err
		}
		return l.saveIdentity(ctx, &cl)
	}
	return fmt.Errorf("cluster %s: no Cluster of uid %s on the front: it was deleted", cluster, uid)
}

// saveIdentity keeps an external cluster's identity on the front, unless it is kept
// already: the identity is minted once, and never replaced. The DataDir records whose
// copy it holds (carryIdentity).
func (l *Loop) saveIdentity(ctx context.Context, cl *v1alpha1.Cluster) error {
	if cl.Spec.Datastore != v1alpha1.DatastoreExternal {
		return nil
	}
	if err := atomicfile.WriteFile(l.P.tenantSpec(cl.Name).Layout().ClusterUID(), []byte(cl.UID), 0o600); err != nil {
		return err
	}
	_, err := l.Core.CoreV1().Secrets(cl.Namespace).Get(ctx, identitySecret(cl.Name), metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	data := map[string][]byte{}
	for f, path := range backup.IdentityFiles(l.P.tenantSpec(cl.Name).Layout()) {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("cluster %s: its identity: %w", cl.Name, err)
		}
		data[secretKey(f)] = b
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: identitySecret(cl.Name), Namespace: cl.Namespace, Labels: managedBy,
			Annotations: map[string]string{clusterUIDAnnotation: string(cl.UID)}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	_, err = l.Core.CoreV1().Secrets(cl.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// deleteIdentity removes the front's copy of a deleted cluster's identity.
func (l *Loop) deleteIdentity(ctx context.Context, cl *v1alpha1.Cluster) error {
	err := l.Core.CoreV1().Secrets(cl.Namespace).Delete(ctx, identitySecret(cl.Name), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// PlaceIdentity writes files (backup.IdentityFiles' names) into the DataDir of cluster
// name, made if it is missing, unless the DataDir has an identity already.
func (p *Provider) PlaceIdentity(name string, files map[string][]byte) error {
	s := p.tenantSpec(name)
	l := s.Layout()
	if exists(l.Identity()) {
		return nil
	}
	as, err := p.runAs(s)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	fresh := !exists(l.Root)
	if err := p.makeDataDir(s, as); err != nil {
		if fresh {
			os.RemoveAll(l.Root)
		}
		return fmt.Errorf("cluster %s: DataDir %s: %w", name, l.Root, err)
	}
	dests := backup.IdentityFiles(l)
	var errs []error
	for f, b := range files {
		if f == backup.IdentityFile {
			continue // last: its presence says the rest is there
		}
		errs = append(errs, atomicfile.WriteFile(dests[f], b, 0o600))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %s: place its identity: %w", name, err)
	}
	return atomicfile.WriteFile(dests[backup.IdentityFile], files[backup.IdentityFile], 0o600)
}
