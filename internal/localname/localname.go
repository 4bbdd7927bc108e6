// Package localname decides a Cluster's local name: the one name its instance knows it
// by, on the host and in the tenant's cluster. Its DataDir, port lease, OS user, control
// groups, serving certificate, node names and providerIDs are all derived from it, so it
// must be unique among every Cluster of the front, though a Cluster's own name is unique
// only within its namespace (two accounts may each have prod).
//
// The local name is chosen once, when a Cluster is first bound, and recorded on it
// (v1alpha1.LocalNameAnnotation); it never changes after, wherever the Cluster moves. The
// choice is a pure function of the Cluster and of the others the front shows: no clock,
// no I/O.
//
// The bare name (prod) goes to a Cluster of the default namespace, and to one that ran
// before names were per namespace (its DataDir, port and processes already carry the bare
// name: a migration moves nothing), when no other Cluster holds it. Any other gets a name
// of its own: its name, cut to fit, and a hash of its namespace and name (prod-1f2e3d4c).
package localname

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// MaxLength is the longest local name: the provider's limit on cluster names, within
// which every derived name (node names, certificate names, DataDirs) stays valid.
const MaxLength = 40

// hashLength is the hex digits of a hashed local name.
const hashLength = 8

// DefaultNamespace is the namespace whose Clusters keep their bare name.
const DefaultNamespace = "default"

// Cluster is what the choice reads of one Cluster on the front.
type Cluster struct {
	Namespace, Name, UID string
	// Local is its recorded local name; "" when none is recorded yet.
	Local string
	// Legacy: something of it exists already. Of another Cluster: it is bound, or its
	// status says it ran, so it holds its recorded name, or, from before names were
	// recorded, its bare name. Of the Cluster choosing: its data (or a restore staged for
	// it) is on the host under the name it asks for, so it may keep its bare name.
	Legacy bool
	// Created is when the Cluster was made: of Clusters that show one name where nothing
	// says whose it is, the older keeps it (MayUse).
	Created time.Time
}

// holds is the local name a Cluster holds: its recorded one, or its bare name if it ran
// before names were recorded. One not bound and never run holds nothing, whatever its
// annotation asks: a name is held only once an instance has given it.
func (c Cluster) holds() string {
	switch {
	case !c.Legacy:
		return ""
	case c.Local != "":
		return c.Local
	}
	return c.Name
}

// Choose is the local name of c, which has none recorded yet, among others (every other
// Cluster on the front; c itself, by UID, is skipped). It is the bare name when c may
// have it (default namespace or legacy) and no other holds it; else the first hashed name
// no other holds.
func Choose(c Cluster, others []Cluster) string {
	held := make(map[string]bool, len(others))
	for _, o := range others {
		if o.UID == c.UID && c.UID != "" {
			continue
		}
		if h := o.holds(); h != "" {
			held[h] = true
		}
	}
	if (c.Legacy || c.Namespace == DefaultNamespace) && !held[c.Name] {
		return c.Name
	}
	for salt := 0; ; salt++ {
		if n := Hashed(c.Namespace, c.Name, salt); !held[n] {
			return n
		}
	}
}

// Hashed is the salt-th hashed local name of namespace/name: the name cut to leave room,
// a dash, and hex of a hash of namespace, name and salt. It is a valid cluster name (a
// DNS label that starts with a letter) of at most MaxLength characters.
func Hashed(namespace, name string, salt int) string {
	in := namespace + "/" + name
	if salt > 0 {
		in += "/" + strconv.Itoa(salt)
	}
	sum := sha256.Sum256([]byte(in))
	prefix := name
	if max := MaxLength - 1 - hashLength; len(prefix) > max {
		prefix = prefix[:max]
	}
	for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
		prefix = prefix[:len(prefix)-1] // no double dash where the name was cut
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:hashLength]
}

// MayUse says whether c may use its recorded local name (c.Local) on a host. owner is
// the Cluster uid the name's DataDir there records ("" when it records none), ownerLive
// whether that Cluster is still on the front, known the name the host's instance knows c
// by ("" when none), and others every other Cluster that shows the name. A DataDir that
// is another live Cluster's is never c's: a Cluster cannot take another's data,
// processes or port by naming them. Where the DataDir records nothing (made before owners
// were recorded, or a bring-up that failed before its end) or a Cluster gone (a
// leftover), a name the instance knows c by is c's; otherwise the oldest Cluster that
// holds the name keeps it, so that a copy never takes what the original has.
func MayUse(c Cluster, owner string, ownerLive bool, known string, others []Cluster) bool {
	switch {
	case owner == c.UID:
		return true
	case owner != "" && ownerLive:
		return false
	case known == c.Local:
		return true
	}
	for _, o := range others {
		if o.UID != c.UID && o.holds() == c.Local && o.Local == c.Local && Older(o, c) {
			return false
		}
	}
	return true
}

// Older says whether a was made before b (the uid breaks a tie).
func Older(a, b Cluster) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.UID < b.UID
}
