package frontdoor

import (
	"slices"
	"strings"
	"testing"
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
	} {
		err := ValidateBaseDomain(domain)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateBaseDomain(%q) = %v, want an error saying %q", domain, err, want)
		}
	}
}
