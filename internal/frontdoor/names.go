package frontdoor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Names decides which cluster a TLS server name belongs to: `<cluster>.<namespace>.<BaseDomain>`,
// `<cluster>.<BaseDomain>` for a cluster whose local name is its own name, or one of Extra
// (a name an operator gave a cluster besides its own, such as a vanity domain). Clusters
// are known here by their local name (internal/localname): unique where a cluster's own
// name is unique only in its namespace. It is pure data; the Server consults it before any
// backend is touched, so a name that maps to no cluster costs nothing but the ClientHello
// read.
type Names struct {
	BaseDomain string
	Extra      map[string]string // server name -> cluster
	// Namespaced is "<cluster>.<namespace>" -> local name, for every Cluster the front
	// shows with one (WithClusters). Nil: none is known, and every label under the base
	// domain is a local name (as before names were per namespace).
	Namespaced map[string]string
	// own is Namespaced turned round: local name -> "<cluster>.<namespace>".
	own map[string]string
}

// Hosted is one Cluster the front shows: its namespace, its name, and its local name.
type Hosted struct{ Namespace, Name, Local string }

// WithClusters is n knowing clusters by namespace and by local name.
func (n Names) WithClusters(clusters []Hosted) Names {
	n.Namespaced, n.own = make(map[string]string, len(clusters)), make(map[string]string, len(clusters))
	for _, c := range clusters {
		k := c.Name + "." + c.Namespace
		n.Namespaced[k], n.own[c.Local] = c.Local, k
	}
	return n
}

// bare says whether local is routed as `<local>.<BaseDomain>`: it is the cluster's own
// name, or no cluster is known by namespace to say otherwise.
func (n Names) bare(local string) bool {
	k, ok := n.own[local]
	return !ok || strings.HasPrefix(k, local+".")
}

// MaxClusterLabel is the longest cluster name the front door serves under a base domain;
// it matches the provider's own limit on cluster names.
const MaxClusterLabel = 40

// maxNamespaceLabel is the longest namespace: a DNS label.
const maxNamespaceLabel = validation.DNS1123LabelMaxLength

// ValidateBaseDomain checks that every cluster name can live under domain: it must be a
// DNS-1123 subdomain with room for a 40-character cluster label and a namespace in front
// of it (253 characters in all). The error names what is wrong; the caller names the flag.
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
	if n := MaxClusterLabel + 1 + maxNamespaceLabel + 1 + len(domain); n > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("base domain %q: %d characters leave no room for a %d-character cluster name and a %d-character namespace (a DNS name has at most %d)",
			domain, len(domain), MaxClusterLabel, maxNamespaceLabel, validation.DNS1123SubdomainMaxLength)
	}
	return nil
}

// Cluster is the cluster serverName belongs to, and whether it belongs to one. Matching
// ignores case and one trailing dot, as DNS does. Under the base domain stands a cluster
// and its namespace, or the bare name of a cluster that has it (bare); a hashed local name
// is no name a cluster is reached by.
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
	if !ok || label == "" {
		return "", false
	}
	if cluster, ns, two := strings.Cut(label, "."); two {
		if cluster == "" || strings.Contains(ns, ".") {
			return "", false
		}
		local, ok := n.Namespaced[label]
		return local, ok
	}
	if len(label) > MaxClusterLabel || !n.bare(label) {
		return "", false
	}
	return label, true
}

// Own are cluster's own names under the base domain, the first the one its kubeconfig
// dials: its bare name when it has one (so a kubeconfig from before names were per
// namespace keeps working), then `<cluster>.<namespace>.<BaseDomain>` when the cluster is
// known by namespace. None without a base domain.
func (n Names) Own(local string) []string {
	if n.BaseDomain == "" {
		return nil
	}
	base := strings.ToLower(n.BaseDomain)
	var out []string
	if n.bare(local) {
		out = append(out, local+"."+base)
	}
	if k, ok := n.own[local]; ok {
		out = append(out, k+"."+base)
	}
	return out
}

// Of are the server names of cluster (a local name): its own under the base domain, then
// every extra name given it, sorted. They are the DNS names its apiserver's serving
// certificate must carry, so that a client which verifies the server sees the name it
// dialled.
func (n Names) Of(cluster string) []string {
	var out []string
	for name, c := range n.Extra {
		if c == cluster {
			out = append(out, strings.TrimSuffix(strings.ToLower(name), "."))
		}
	}
	slices.Sort(out)
	return append(n.Own(cluster), out...)
}

// Claim is one cluster's wish for extra names (a Cluster's spec.extraNames), with what
// orders it against the others: the older claim keeps a name two clusters want.
type Claim struct {
	Cluster string
	Names   []string
	Since   time.Time // the Cluster's creation
}

// Refusal is one extra name a cluster does not get, and why: the error its Cluster shows.
type Refusal struct {
	Cluster string
	Index   int // into the claim's Names, for the field path spec.extraNames[Index]
	Name    string
	Reason  string
}

func (r Refusal) Error() string {
	return fmt.Sprintf("spec.extraNames[%d] %q: %s", r.Index, r.Name, r.Reason)
}

// WithClaims is n with the extra names of claims, decided alone from them so that every
// pass, and every provider, decides the same: a name under the base domain is refused (a
// label there is a cluster's own name, even one not made yet), and of two clusters that
// claim one name the older claim keeps it (then the cluster name that sorts first). Names
// are compared as DNS compares them: case and a trailing dot ignored. Validity of each
// name is the API's concern (the CRD); a name that is not a DNS name is refused here too,
// so that nothing unroutable reaches a certificate.
func (n Names) WithClaims(claims []Claim) (Names, []Refusal) {
	order := slices.Clone(claims)
	slices.SortStableFunc(order, func(a, b Claim) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Cluster, b.Cluster)
	})
	base := strings.ToLower(strings.TrimSuffix(n.BaseDomain, "."))
	out := Names{BaseDomain: n.BaseDomain, Extra: map[string]string{}, Namespaced: n.Namespaced, own: n.own}
	var refused []Refusal
	for _, c := range order {
		for i, raw := range c.Names {
			name := strings.ToLower(strings.TrimSuffix(raw, "."))
			refuse := func(reason string) { refused = append(refused, Refusal{c.Cluster, i, raw, reason}) }
			switch holder, taken := out.Extra[name]; {
			case len(validation.IsDNS1123Subdomain(name)) > 0 || !strings.Contains(name, "."):
				refuse("not a DNS name of two labels or more, such as api.acme.example")
			case base != "" && (name == base || strings.HasSuffix(name, "."+base)):
				refuse(fmt.Sprintf("is under the base domain %s, whose names are the clusters' own; choose a name outside it", base))
			case taken && holder == c.Cluster:
				// listed twice by one cluster: the CRD refuses that; harmless here
			case taken:
				refuse(fmt.Sprintf("is cluster %s's already (its claim is older); choose another name or remove it there first", holder))
			default:
				out.Extra[name] = c.Cluster
			}
		}
	}
	return out, refused
}
