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
	"sync"

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

// Owners finds, among the DataDirs under one directory, the one that records a Cluster
// uid as its owner: the local name an instance knows a Cluster by, whatever its
// annotation says now. The DataDirs are read once, at the first question, then kept in
// step by Record; each answer is checked against the DataDir itself.
type Owners struct {
	dir    string
	layout func(name string) clusterstack.Layout
	mu     sync.Mutex
	byUID  map[string]string // nil until read
}

// NewOwners is the owners of the DataDirs under dir, each laid out by layout(its name).
func NewOwners(dir string, layout func(name string) clusterstack.Layout) *Owners {
	return &Owners{dir: dir, layout: layout}
}

// Of is the name of the DataDir that records uid; "" when none does, or when two do
// (which is uid's own is not known).
func (o *Owners) Of(uid string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byUID == nil {
		o.byUID = map[string]string{}
		twice := map[string]bool{}
		entries, _ := os.ReadDir(o.dir)
		for _, e := range entries {
			if owner := Owner(o.layout(e.Name())); e.IsDir() && owner != "" {
				twice[owner] = o.byUID[owner] != ""
				o.byUID[owner] = e.Name()
			}
		}
		for u, t := range twice {
			if t {
				delete(o.byUID, u)
			}
		}
	}
	name := o.byUID[uid]
	if name != "" && Owner(o.layout(name)) != uid {
		delete(o.byUID, uid) // removed, or another's since
		return ""
	}
	return name
}

// Record records that the DataDir name is the Cluster of uid's (SetOwner), unless it says
// so already.
func (o *Owners) Record(name, uid string) error {
	if l := o.layout(name); Owner(l) != uid {
		if err := SetOwner(l, uid); err != nil {
			return err
		}
	}
	o.mu.Lock()
	if o.byUID != nil {
		o.byUID[uid] = name
	}
	o.mu.Unlock()
	return nil
}
