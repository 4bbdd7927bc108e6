package frontdoor

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClusterOfAServerName(t *testing.T) {
	n := Names{BaseDomain: "kcp.example", Extra: map[string]string{"api.shop.example": "shop"}}
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"demo.kcp.example", "demo", true},
		{"DEMO.KCP.Example.", "demo", true}, // DNS ignores case and the root dot
		{"api.shop.example", "shop", true},
		{"API.shop.example.", "shop", true},
		{"kcp.example", "", false},     // the base domain itself is no cluster
		{".kcp.example", "", false},    // empty label
		{"a.b.kcp.example", "", false}, // one label only
		{"demo.kcp.example.evil", "", false},
		{"demokcp.example", "", false},
		{"demo.other.example", "", false},
		{"", "", false},
		{strings.Repeat("a", 41) + ".kcp.example", "", false},
	} {
		got, ok := n.Cluster(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Cluster(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := (Names{}).Cluster("demo.kcp.example"); ok {
		t.Errorf("without a base domain, Cluster = %q, true; want no cluster", got)
	}
}

func TestTheNamesOfACluster(t *testing.T) {
	n := Names{BaseDomain: "KCP.example", Extra: map[string]string{"z.shop.example": "shop", "A.shop.example": "shop", "x.example": "other"}}
	if got, want := n.Of("shop"), []string{"shop.kcp.example", "a.shop.example", "z.shop.example"}; !slices.Equal(got, want) {
		t.Errorf("Of(shop) = %v, want %v", got, want)
	}
	for _, name := range n.Of("shop") {
		if c, ok := n.Cluster(name); !ok || c != "shop" {
			t.Errorf("a name Of(shop) gave, %q, routes to %q, %v", name, c, ok)
		}
	}
	if got := (Names{}).Of("shop"); len(got) != 0 {
		t.Errorf("without a base domain or extras, Of = %v, want none", got)
	}
}

// Two accounts each have prod: each is reached as <cluster>.<namespace>.<base>, and the
// bare name is the one cluster's whose local name it is (the default namespace's, or one
// from before names were per namespace); a hashed local name reaches nothing.
func TestClustersByNamespace(t *testing.T) {
	n := Names{BaseDomain: "kcp.example", Extra: map[string]string{"api.shop.example": "prod-1a2b3c4d"}}.WithClusters([]Hosted{
		{Namespace: "default", Name: "prod", Local: "prod"},
		{Namespace: "acct-a", Name: "prod", Local: "prod-1a2b3c4d"},
		{Namespace: "acct-b", Name: "web", Local: "web"}, // legacy: it kept its bare name
	})
	for name, want := range map[string]string{
		"prod.kcp.example":          "prod",
		"prod.default.kcp.example":  "prod",
		"prod.acct-a.kcp.example":   "prod-1a2b3c4d",
		"PROD.Acct-A.kcp.example.":  "prod-1a2b3c4d",
		"web.kcp.example":           "web",
		"web.acct-b.kcp.example":    "web",
		"api.shop.example":          "prod-1a2b3c4d",
		"prod-1a2b3c4d.kcp.example": "",
		"prod.acct-c.kcp.example":   "",
		"web.acct-a.kcp.example":    "",
		"a.prod.acct-a.kcp.example": "",
		".acct-a.kcp.example":       "",
		"unknown.kcp.example":       "unknown", // not known by namespace yet: Address decides
	} {
		got, ok := n.Cluster(name)
		if got != want || ok != (want != "") {
			t.Errorf("Cluster(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for local, want := range map[string][]string{
		"prod":          {"prod.kcp.example", "prod.default.kcp.example"},
		"prod-1a2b3c4d": {"prod.acct-a.kcp.example", "api.shop.example"},
		"web":           {"web.kcp.example", "web.acct-b.kcp.example"},
	} {
		if got := n.Of(local); !slices.Equal(got, want) {
			t.Errorf("Of(%s) = %v, want %v", local, got, want)
		}
		for _, name := range n.Of(local) {
			if c, _ := n.Cluster(name); c != local {
				t.Errorf("a name Of(%s) gave, %q, routes to %q", local, name, c)
			}
		}
	}
	// Claims decided later keep what is known by namespace.
	if withClaims, _ := n.WithClaims(nil); withClaims.Own("prod-1a2b3c4d")[0] != "prod.acct-a.kcp.example" {
		t.Errorf("WithClaims lost the clusters known by namespace: %v", withClaims.Own("prod-1a2b3c4d"))
	}
}

func TestValidateBaseDomain(t *testing.T) {
	if err := ValidateBaseDomain("kcp.example"); err != nil {
		t.Errorf("kcp.example: %v", err)
	}
	for domain, want := range map[string]string{
		"":                                "empty",
		"localhost":                       "two labels",
		"Kcp.Example":                     "lowercase",
		"kcp_example.com":                 "lowercase",
		"-kcp.example":                    "alphanumeric",
		"kcp.example.":                    "alphanumeric",
		strings.Repeat("a.", 106) + "com": "no room for a 40-character cluster name",
		strings.Repeat("a.", 74) + "com":  "and a 63-character namespace",
	} {
		err := ValidateBaseDomain(domain)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateBaseDomain(%q) = %v, want an error saying %q", domain, err, want)
		}
	}
}

func TestExtraNamesGoToTheOlderClaim(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	claims := []Claim{
		{Cluster: "late", Since: t0.Add(time.Hour), Names: []string{"API.shop.example.", "late.example"}},
		{Cluster: "shop", Since: t0, Names: []string{"api.shop.example", "www.shop.example"}},
		{Cluster: "bad", Since: t0, Names: []string{"x.kcp.example", "kcp.example", "a.b.KCP.example", "nodot", "under_score.example", "ok.example"}},
		{Cluster: "twin", Since: t0.Add(time.Hour), Names: []string{"twin.example"}},
		{Cluster: "atwin", Since: t0.Add(time.Hour), Names: []string{"twin.example"}}, // same age: the name that sorts first
	}
	n, refused := (Names{BaseDomain: "kcp.example"}).WithClaims(claims)
	for name, want := range map[string]string{
		"api.shop.example": "shop", "www.shop.example": "shop", "late.example": "late",
		"ok.example": "bad", "twin.example": "atwin", "shop.kcp.example": "shop",
	} {
		if got, ok := n.Cluster(name); !ok || got != want {
			t.Errorf("%s routes to %q, %v; want %q", name, got, ok, want)
		}
	}
	var got []string
	for _, r := range refused {
		got = append(got, r.Cluster+": "+r.Error())
	}
	want := []string{
		`bad: spec.extraNames[0] "x.kcp.example": is under the base domain kcp.example, whose names are the clusters' own; choose a name outside it`,
		`bad: spec.extraNames[1] "kcp.example": is under the base domain kcp.example, whose names are the clusters' own; choose a name outside it`,
		`bad: spec.extraNames[2] "a.b.KCP.example": is under the base domain kcp.example, whose names are the clusters' own; choose a name outside it`,
		`bad: spec.extraNames[3] "nodot": not a DNS name of two labels or more, such as api.acme.example`,
		`bad: spec.extraNames[4] "under_score.example": not a DNS name of two labels or more, such as api.acme.example`,
		`late: spec.extraNames[0] "API.shop.example.": is cluster shop's already (its claim is older); choose another name or remove it there first`,
		`twin: spec.extraNames[0] "twin.example": is cluster atwin's already (its claim is older); choose another name or remove it there first`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("refused:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if c, ok := n.Cluster("x.kcp.example"); !ok || c != "x" {
		t.Errorf("a refused name under the base stays the cluster x's own: got %q, %v", c, ok)
	}
	// The same claims in any order decide the same.
	slices.Reverse(claims)
	if n2, r2 := (Names{BaseDomain: "kcp.example"}).WithClaims(claims); !maps.Equal(n.Extra, n2.Extra) || len(r2) != len(refused) {
		t.Errorf("order changed the outcome: %v vs %v", n.Extra, n2.Extra)
	}
}
