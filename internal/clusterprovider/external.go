package clusterprovider

import (
	"context"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/identitystore"
)

// A cluster whose datastore is external may come up on any instance, as itself: its
// identity is kept on the front (internal/identitystore), written by the first bring-up
// anywhere before its datastore is taken (KeepIdentity), and placed by any instance that
// brings it up without one (carryIdentity). This file wires the store to the front and
// the DataDir.

// carryIdentity, for an external cluster, places the identity the front keeps for it in
// its DataDir before a bring-up, when the DataDir has none (a first bring-up on this
// instance, such as after a failover). The first bring-up anywhere finds no Secret and
// mints one; KeepIdentity keeps it before the datastore is taken. A DataDir here of
// another Cluster of the name (one deleted while this host was away) is a stale copy: it
// goes first. name is the Cluster's, local its local name.
func (l *Loop) carryIdentity(ctx context.Context, ns, name, local string, np NodePolicy) error {
	if np.ExternalUID == "" {
		return nil
	}
	layout := l.P.tenantSpec(local).Layout()
	if exists(layout.Root) && !l.P.HasDatastore(local) {
		// A DataDir says whose copy it is once its identity is kept or placed; one that
		// does not say is this Cluster's, cut short before.
		if owner := identitystore.Owner(layout); owner != "" && owner != np.ExternalUID {
			l.Log.Info("a DataDir of another Cluster of the name is here: removed", "cluster", ns+"/"+name)
			if err := l.P.RemoveDataDir(local); err != nil {
				return err
			}
		}
	}
	sec, err := l.Core.CoreV1().Secrets(ns).Get(ctx, identitystore.SecretName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster %s: read its identity from the front: %w", name, err)
	}
	files, err := identitystore.FromSecret(sec, np.ExternalUID)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	if err := l.P.PlaceIdentity(local, files); err != nil {
		return err
	}
	return identitystore.SetOwner(layout, np.ExternalUID)
}

// KeepIdentity is the provider's Config.KeepIdentity: the identity of the external cluster
// of local name cluster, of the Cluster whose front uid is uid, kept on the front before its
// datastore is taken, unless it is kept already (it is minted once, and never replaced);
// the DataDir records whose copy it holds. A Cluster of the name with another uid
// (deleted and made again during the bring-up) is not this one: nothing is kept for it.
func (l *Loop) KeepIdentity(ctx context.Context, cluster, uid string) error {
	named, err := l.clusterIndex.ByIndex(byLocal, cluster)
	if err != nil {
		return err
	}
	for _, o := range named {
		u := o.(*unstructured.Unstructured)
		if string(u.GetUID()) != uid {
			continue
		}
		layout := l.P.tenantSpec(cluster).Layout()
		if err := identitystore.SetOwner(layout, uid); err != nil {
			return err
		}
		_, err := l.Core.CoreV1().Secrets(u.GetNamespace()).Get(ctx, identitystore.SecretName(u.GetName()), metav1.GetOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return err
		}
		files, err := identitystore.Read(layout)
		if err != nil {
			return fmt.Errorf("cluster %s: its identity: %w", cluster, err)
		}
		_, err = l.Core.CoreV1().Secrets(u.GetNamespace()).Create(ctx, identitystore.ToSecret(u.GetNamespace(), u.GetName(), uid, managedBy, files), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	return fmt.Errorf("cluster %s: no Cluster of uid %s on the front: it was deleted", cluster, uid)
}

// deleteIdentity removes the front's copy of a deleted cluster's identity.
func (l *Loop) deleteIdentity(ctx context.Context, cl *v1alpha1.Cluster) error {
	err := l.Core.CoreV1().Secrets(cl.Namespace).Delete(ctx, identitystore.SecretName(cl.Name), metav1.DeleteOptions{})
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
	if err := identitystore.Place(l, files); err != nil {
		return fmt.Errorf("cluster %s: place its identity: %w", name, err)
	}
	return nil
}
