package backup

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"socialweb.computer/kcp/internal/clusterstack"
)

// Names of the identity files in an archive.
const (
	IdentityFile     = "identity/identity.json"
	EncryptionConfig = "identity/encryption-config.yaml"
)

// IdentityFiles are the files of a DataDir that make a cluster who it is, by their name
// in an archive, with their path in l: what its clients trust (the CAs), what its
// service-account tokens are signed with, what its Secrets are encrypted with, and its
// uid. Every other credential is minted from these at its next start.
func IdentityFiles(l clusterstack.Layout) map[string]string {
	return map[string]string{
		IdentityFile:                  l.Identity(),
		"identity/ca.crt":             l.CACert(),
		"identity/ca.key":             l.CAKey(),
		"identity/front-proxy-ca.crt": l.FrontProxyCACert(),
		"identity/front-proxy-ca.key": l.FrontProxyCAKey(),
		"identity/sa.key":             l.ServiceAccountKey(),
		"identity/sa.pub":             l.ServiceAccountPub(),
		EncryptionConfig:              l.EncryptionConfig(),
	}
}

// Carried is which identity files a restore of a backup of cluster from into cluster
// into carries. Into its own name (the cluster lost its data), all of them: it is the same
// cluster, and its tenants' kubeconfigs and service-account tokens keep working. Into
// another name, only the encryption-at-rest key, without which its Secrets do not
// decrypt: it is another cluster, with its own CA, signing keys and uid, and nothing the
// original issued is valid for it.
func Carried(from, into string) []string {
	if from == into {
		return []string{IdentityFile, "identity/ca.crt", "identity/ca.key", "identity/front-proxy-ca.crt", "identity/front-proxy-ca.key",
			"identity/sa.key", "identity/sa.pub", EncryptionConfig}
	}
	return []string{EncryptionConfig}
}

// CheckVersions refuses data written by a newer Kubernetes than the one that would serve
// it (an older apiserver may not read what a newer one stored; an older one's data is
// read and migrated by the apiserver, as an upgrade's is), or dumped from a newer
// PostgreSQL major version than this host's (its pg_dump may write what an older psql and
// server do not take). A version missing on either side is not checked.
func CheckVersions(archive, here map[string]string) error {
	a, aok := minor(archive["kubernetes"])
	h, hok := minor(here["kubernetes"])
	if aok && hok && a > h {
		return fmt.Errorf("the backup was written by Kubernetes %s, newer than this host's %s: restore it on a host running %s or later",
			archive["kubernetes"], here["kubernetes"], archive["kubernetes"])
	}
	pa, aerr := strconv.Atoi(archive["postgres"])
	ph, herr := strconv.Atoi(here["postgres"])
	if aerr == nil && herr == nil && pa > ph {
		return fmt.Errorf("the backup's datastore is PostgreSQL %d, newer than this host's %d: restore it on a host with PostgreSQL %d or later", pa, ph, pa)
	}
	return nil
}

// minor is the minor version of "v1.37.2".
func minor(v string) (int, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 || parts[0] != "1" {
		return 0, false
	}
	n, err := strconv.Atoi(parts[1])
	return n, err == nil
}

// Ephemeral are the keys a restored cluster may rightly lose at once, not counted missing:
// Events and Leases expire by their kine lease (their time-to-live counted from when they
// were written), the apiserver's own leases are replaced by the new apiserver's, and the
// ClusterTrustBundles that publish the cluster's CA are made again from the CA it has
// (under a new name, a new one).
var Ephemeral = []string{"/registry/events/", "/registry/leases/", "/registry/masterleases/", "/registry/clustertrustbundles/"}

// Missing is the keys of want, a backup's, that have (a restored datastore's, both sorted)
// lacks, Ephemeral ones left out.
func Missing(want, have []string) []string {
	var missing []string
	for _, k := range want {
		if slices.ContainsFunc(Ephemeral, func(p string) bool { return strings.HasPrefix(k, p) }) {
			continue
		}
		if _, found := slices.BinarySearch(have, k); !found {
			missing = append(missing, k)
		}
	}
	return missing
}
