// Package identitystore keeps a cluster's identity where every provider instance finds it:
// a Secret <cluster>-identity on the front. A cluster whose datastore is external may come
// up on any instance, and must come up as itself: the same CAs (its tenants' credentials
// stay valid), the same service-account pair (their tokens too), the same encryption key
// (its Secrets decrypt) and the same identity.json (the identity guard finds its own
// identity in the datastore). The files are backup.IdentityFiles; leaves are minted by
// each instance for itself, from these.
//
// The format (ToSecret, FromSecret) is pure; Read and Place are the DataDir's side.
package identitystore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/clusterstack"
)

// SecretName is the Secret that keeps cluster's identity, beside its kubeconfig's.
func SecretName(cluster string) string { return cluster + "-identity" }

// UIDAnnotation on the Secret names the Cluster (its front uid) it is the identity of: a
// Secret left by an earlier Cluster of the name is never taken for this one's.
const UIDAnnotation = "socialweb.computer/cluster-uid"

// key is an identity file's name as a Secret key ("/" is not allowed there).
func key(file string) string { return strings.ReplaceAll(file, "/", ".") }

// ToSecret is the Secret in namespace ns that keeps files (backup.IdentityFiles' names)
// as the identity of the Cluster cluster, uid, with labels.
func ToSecret(ns, cluster, uid string, labels map[string]string, files map[string][]byte) *corev1.Secret {
	data := make(map[string][]byte, len(files))
	for f, b := range files {
		data[key(f)] = b
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(cluster), Namespace: ns, Labels: labels,
			Annotations: map[string]string{UIDAnnotation: uid}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// FromSecret is the identity files sec keeps for the Cluster of uid: an error when it is
// another Cluster's, or lacks one of them.
func FromSecret(sec *corev1.Secret, uid string) (map[string][]byte, error) {
	if got := sec.Annotations[UIDAnnotation]; got != uid {
		return nil, fmt.Errorf("Secret %s/%s is of Cluster uid %q, not this one (%s): delete it", sec.Namespace, sec.Name, got, uid)
	}
	files := map[string][]byte{}
	for f := range backup.IdentityFiles(clusterstack.Layout{}) {
		b, ok := sec.Data[key(f)]
		if !ok {
			return nil, fmt.Errorf("Secret %s/%s lacks %s", sec.Namespace, sec.Name, key(f))
		}
		files[f] = b
	}
	return files, nil
}

// Read is the identity files of the DataDir l.
func Read(l clusterstack.Layout) (map[string][]byte, error) {
	files := map[string][]byte{}
	for f, path := range backup.IdentityFiles(l) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		files[f] = b
	}
	return files, nil
}

// Place writes files into the DataDir l (made, and owned as it should be, by the caller),
// identity.json last: its presence says the rest is there.
func Place(l clusterstack.Layout, files map[string][]byte) error {
	dests := backup.IdentityFiles(l)
	var errs []error
	for f, b := range files {
		if f != backup.IdentityFile {
			errs = append(errs, atomicfile.WriteFile(dests[f], b, 0o600))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return atomicfile.WriteFile(dests[backup.IdentityFile], files[backup.IdentityFile], 0o600)
}

// Owner is the front uid of the Cluster whose copy the DataDir l is ("" when it does not
// say: a copy cut short before its identity was kept or placed).
func Owner(l clusterstack.Layout) string {
	b, _ := os.ReadFile(l.ClusterUID())
	return string(b)
}

// SetOwner records that the DataDir l is a copy of the Cluster of uid.
func SetOwner(l clusterstack.Layout, uid string) error {
	return atomicfile.WriteFile(l.ClusterUID(), []byte(uid), 0o600)
}
