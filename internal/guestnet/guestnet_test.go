package guestnet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestPickSubnetAvoidsEveryHostPrefix(t *testing.T) {
	pool := netip.MustParsePrefix("10.250.0.0/16")
	for _, tc := range []struct {
		used []string
		want string
	}{
		{nil, "10.250.0.0/24"},
		{[]string{"10.250.0.0/24"}, "10.250.1.0/24"},
		{[]string{"10.250.0.7/32", "10.250.1.0/25"}, "10.250.2.0/24"},
		{[]string{"10.0.0.0/8"}, ""},                  // a wide route over the whole pool
		{[]string{"192.168.0.0/16"}, "10.250.0.0/24"}, // elsewhere: no clash
	} {
		var used []netip.Prefix
		for _, u := range tc.used {
			used = append(used, netip.MustParsePrefix(u))
		}
		got, err := PickSubnet(pool, used)
		if tc.want == "" {
			if err == nil {
				t.Errorf("used %v: got %s, want an error", tc.used, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("used %v: got %s %v, want %s", tc.used, got, err, tc.want)
		}
	}
	if _, err := PickSubnet(netip.MustParsePrefix("10.0.0.0/25"), nil); err == nil {
		t.Error("a pool narrower than /24 was accepted")
	}
	// The last /24 of a /16 pool is reached, and nothing past the pool is offered.
	var used []netip.Prefix
	for i := 0; i < 255; i++ {
		used = append(used, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, byte(i), 0}), 24))
	}
	if got, err := PickSubnet(pool, used); err != nil || got.String() != "10.250.255.0/24" {
		t.Errorf("all but the last used: %s %v", got, err)
	}
	if got, err := PickSubnet(pool, append(used, netip.MustParsePrefix("10.250.255.0/24"))); err == nil {
		t.Errorf("a full pool offered %s", got)
	}
}

func TestAddressesAndPodRanges(t *testing.T) {
	sub := netip.MustParsePrefix("10.250.3.0/24")
	if g := Gateway(sub); g.String() != "10.250.3.1" {
		t.Errorf("gateway %s", g)
	}
	a, err := PickAddress(sub, []netip.Addr{netip.MustParseAddr("10.250.3.2"), netip.MustParseAddr("10.250.3.4")})
	if err != nil || a.String() != "10.250.3.3" {
		t.Errorf("PickAddress = %s %v, want the lowest free, 10.250.3.3", a, err)
	}
	var all []netip.Addr
	for x := netip.MustParseAddr("10.250.3.2"); sub.Contains(x); x = x.Next() {
		all = append(all, x)
	}
	if a, err := PickAddress(sub, all); err == nil {
		t.Errorf("a full subnet offered %s", a)
	}
	// Pod ranges follow the guest's last octet, inside the cluster's range, never twice.
	seen := map[netip.Prefix]bool{}
	for x := netip.MustParseAddr("10.250.3.2"); x.As4()[3] < 255; x = x.Next() {
		p := PodCIDR(x)
		if !ClusterPodCIDR.Contains(p.Addr()) || p.Bits() != 24 || seen[p] {
			t.Fatalf("PodCIDR(%s) = %s", x, p)
		}
		seen[p] = true
	}
}

func TestNamesFitAndDiffer(t *testing.T) {
	a, b := BridgeName("/d/clusters/a"), BridgeName("/d/clusters/b")
	if a == b || len(a) > 15 || !strings.HasPrefix(a, BridgePrefix) {
		t.Errorf("bridges %q %q", a, b)
	}
	h1, g1 := VethNames("/d/clusters/a", "n1")
	h2, _ := VethNames("/d/clusters/a", "n2")
	if h1 == h2 || len(h1) > 15 || len(g1) > 15 || !strings.HasPrefix(g1, GuestPrefix) {
		t.Errorf("veths %q %q %q", h1, g1, h2)
	}
	if c := ChainName("/d/clusters/a"); len(c) > 28 || !strings.HasPrefix(c, ChainPrefix) {
		t.Errorf("chain %q", c)
	}
}

// The chain lets a guest reach its apiserver's port and its own bridge, and drops the
// rest; the NAT sends the gateway's port to loopback, that port only.
func TestRulesOpenOnlyTheAPIServer(t *testing.T) {
	rules := Rules("swkx", 31000)
	last := rules[len(rules)-1]
	if !slices.Equal(last, []string{"-j", "DROP"}) {
		t.Errorf("the chain ends with %v, want a DROP", last)
	}
	var accepts []string
	for _, r := range rules[:len(rules)-1] {
		accepts = append(accepts, strings.Join(r, " "))
	}
	want := []string{"-i swkx -o swkx -j ACCEPT", "-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT", "-i swkx -d 127.0.0.1/32 -p tcp --dport 31000 -j ACCEPT"}
	if !slices.Equal(accepts, want) {
		t.Errorf("accepts %q, want %q", accepts, want)
	}
	nat := NATRules("swkx", netip.MustParseAddr("10.250.0.1"), 31000)
	if len(nat) != 1 || strings.Join(nat[0], " ") != "-i swkx -d 10.250.0.1/32 -p tcp --dport 31000 -j DNAT --to-destination 127.0.0.1:31000" {
		t.Errorf("nat %q", nat)
	}
}

func TestRestoreInputReplacesOneChain(t *testing.T) {
	got := RestoreInput("filter", "SWK-x", [][]string{{"-j", "DROP"}})
	if got != "*filter\n:SWK-x - [0:0]\n-A SWK-x -j DROP\nCOMMIT\n" {
		t.Errorf("%q", got)
	}
}
