package frontdoor

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Names decides which cluster a TLS server name belongs to: `<cluster>.<BaseDomain>`, or
// one of Extra (a name an operator gave a cluster besides its own, such as a vanity
// domain). It is pure data; the Server consults it before any backend is touched, so a
// name that maps to no cluster costs nothing but the ClientHello read.
type Names struct {
	BaseDomain string
	Extra      map[string]string // server name -> cluster
}

// MaxClusterLabel is the longest cluster name the front door serves under a base domain;
// it matches the provider's own limit on cluster names.
const MaxClusterLabel = 40

// ValidateBaseDomain checks that every cluster name can live under domain: it must be a
// DNS-1123 subdomain with room for a 40-character cluster label in front of it (253
// characters in all). The error names what is wrong; the caller names the flag.
func ValidateBaseDomain(domain string) error {
	if domain == "" {
		return fmt.Errorf("base domain is empty: give a DNS name such as kcp.example")
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return fmt.Errorf("base domain %q: %s", domain, strings.Join(errs, "; "))
	}
	if !strings.Contains(domain, ".") {
		// A single label would make `demo.localhost`-style names; they work in a hosts file
		// but no public DNS, and a one-label base is almost always a typo.
		return fmt.Errorf("base domain %q: want at least two labels (kcp.example), so that clusters get names DNS can serve", domain)
	}
	if n := MaxClusterLabel + 1 + len(domain); n > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("base domain %q: %d characters leave no room for a %d-character cluster name (a DNS name has at most %d)",
			domain, len(domain), MaxClusterLabel, validation.DNS1123SubdomainMaxLength)
	}
	return nil
}

// Cluster is the cluster serverName belongs to, and whether it belongs to one. Matching
// ignores case and one trailing dot, as DNS does. Only one label may stand before the
// base domain: `a.b.kcp.example` is no cluster's.
func (n Names) Cluster(serverName string) (string, bool) {
	name := strings.TrimSuffix(strings.ToLower(serverName), ".")
	if name == "" {
		return "", false
	}
	for extra, c := range n.Extra { // few: a loop keeps the map's keys as the operator wrote them
		if strings.EqualFold(strings.TrimSuffix(extra, "."), name) {
			return c, true
		}
	}
	if n.BaseDomain == "" {
		return "", false
	}
	label, ok := strings.CutSuffix(name, "."+strings.ToLower(n.BaseDomain))
	if !ok || label == "" || strings.Contains(label, ".") || len(label) > MaxClusterLabel {
		return "", false
	}
	return label, true
}

// Of are the server names of cluster, sorted: its own under the base domain, then every
// extra name given it. They are the DNS names its apiserver's serving certificate must
// carry, so that a client which verifies the server sees the name it dialled.
func (n Names) Of(cluster string) []string {
	var out []string
	for name, c := range n.Extra {
		if c == cluster {
			out = append(out, strings.TrimSuffix(strings.ToLower(name), "."))
		}
	}
	slices.Sort(out)
	if n.BaseDomain != "" {
		out = append([]string{cluster + "." + strings.ToLower(n.BaseDomain)}, out...)
	}
	return out
}
