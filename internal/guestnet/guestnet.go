// Package guestnet wires a cluster's real guests on this host: a bridge per cluster with a
// /24 of its own, a veth per guest, and an iptables chain per bridge that lets the guests
// reach their own apiserver's port and each other, and nothing else: no other cluster's
// guests, no other service of the host. The decisions (names, which subnet, which address,
// which pod range, which rules) are pure; the I/O runs ip and iptables.
package guestnet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Name prefixes: every link and chain this package makes starts with one, so the
// no-survivors checks can find them all.
const (
	BridgePrefix = "swk" // a cluster's bridge
	HostPrefix   = "swh" // the host end of a guest's veth
	GuestPrefix  = "swg" // the guest end, until the guest renames it eth0
	ChainPrefix  = "SWK-"
)

// DefaultPool is where clusters' guest subnets come from, a /24 each.
var DefaultPool = netip.MustParsePrefix("10.250.0.0/16")

// ClusterPodCIDR is every cluster's pod range: clusters' guest networks never route to
// each other, so their pods may share addresses. Guest .N of its bridge gets 10.244.N.0/24.
var ClusterPodCIDR = netip.MustParsePrefix("10.244.0.0/16")

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// BridgeName is the bridge of the cluster whose DataDir is dataDir (13 characters: an
// interface name has at most 15).
func BridgeName(dataDir string) string { return BridgePrefix + hash(dataDir) }

// ChainName is the iptables chain of that cluster's bridge.
func ChainName(dataDir string) string { return ChainPrefix + hash(dataDir) }

// VethNames are the two ends of guest nodeID's veth.
func VethNames(dataDir, nodeID string) (host, guest string) {
	h := hash(dataDir, nodeID)
	return HostPrefix + h, GuestPrefix + h
}

// PickSubnet is the first /24 of pool that overlaps none of used (every address and route
// on the host): a clash with anything the host has is avoided, not discovered later.
func PickSubnet(pool netip.Prefix, used []netip.Prefix) (netip.Prefix, error) {
	if !pool.Addr().Is4() || pool.Bits() > 24 {
		return netip.Prefix{}, fmt.Errorf("guest network pool %s: want an IPv4 prefix of /24 or wider", pool)
	}
	pool = pool.Masked()
	for a := pool.Addr(); pool.Contains(a); {
		p := netip.PrefixFrom(a, 24)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
		b := a.As4()
		if b[2] == 255 {
			if b[1] == 255 {
				break
			}
			b[1]++
			b[2] = 0
		} else {
			b[2]++
		}
		a = netip.AddrFrom4(b)
	}
	return netip.Prefix{}, fmt.Errorf("guest network pool %s: every /24 overlaps an address or route of this host", pool)
}

// Gateway is the bridge's own address in subnet: .1.
func Gateway(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next() }

// PickAddress is the lowest guest address of subnet (.2 to .254) not in used.
func PickAddress(subnet netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	a := Gateway(subnet).Next()
	for i := 2; i < 255; i, a = i+1, a.Next() {
		if !slices.Contains(used, a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("guest subnet %s: all 253 guest addresses are in use", subnet)
}

// PodCIDR is the pod range of the guest at addr: 10.244.<its last octet>.0/24, so a
// guest's pods' range follows from its address alone.
func PodCIDR(addr netip.Addr) netip.Prefix {
	b := ClusterPodCIDR.Addr().As4()
	b[2] = addr.As4()[3]
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// Rules are the chain's rules, in order, for a bridge whose apiserver listens on
// 127.0.0.1:port: guests reach each other (bridged frames that br_netfilter shows to
// iptables), answers to connections the host opened (the apiserver to the kubelets), and
// the apiserver's port after NAT; everything else from or to the bridge is dropped.
func Rules(bridge string, port int) [][]string {
	p := strconv.Itoa(port)
	return [][]string{
		{"-i", bridge, "-o", bridge, "-j", "ACCEPT"},
		{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-i", bridge, "-d", "127.0.0.1/32", "-p", "tcp", "--dport", p, "-j", "ACCEPT"},
		{"-j", "DROP"},
	}
}

// NATRules send a guest's connection to the gateway's port P on to the apiserver on
// 127.0.0.1:P (the bridge has route_localnet set for it).
func NATRules(bridge string, gateway netip.Addr, port int) [][]string {
	p := strconv.Itoa(port)
	return [][]string{{"-i", bridge, "-d", gateway.String() + "/32", "-p", "tcp", "--dport", p, "-j", "DNAT", "--to-destination", "127.0.0.1:" + p}}
}

// Jumps are where the chain is entered from the built-in chains: table, chain, rule.
func Jumps(bridge, chain string) [][]string {
	return [][]string{
		{"filter", "INPUT", "-i", bridge, "-j", chain},
		{"filter", "FORWARD", "-i", bridge, "-j", chain},
		{"filter", "FORWARD", "-o", bridge, "-j", chain},
		{"nat", "PREROUTING", "-i", bridge, "-j", chain},
	}
}

// RestoreInput is iptables-restore's input that makes chain in table hold exactly rules:
// with --noflush, a chain declared in the input is emptied and refilled in the same
// transaction, and no other chain is touched.
func RestoreInput(table, chain string, rules [][]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n", table, chain)
	for _, r := range rules {
		fmt.Fprintf(&b, "-A %s %s\n", chain, strings.Join(r, " "))
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
