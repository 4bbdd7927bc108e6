package guestnet

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Network is one cluster's guest network as it stands on the host.
type Network struct {
	Bridge, Chain string
	Subnet        netip.Prefix
	Gateway       netip.Addr
}

// lockPath serialises subnet choices of every provider on the host: two choosing at once
// could both find the same /24 free.
const lockPath = "/run/socialweb-kcp/guestnet.lock"

// Ensure makes the cluster's bridge when it has none, and writes its chain for the
// apiserver's port. The bridge's /24 is want when valid (the subnet the cluster's listed
// guests have their addresses in: a cluster that starts again gets its guests' subnet
// back), else the first of pool that overlaps no address or route of the host; either is
// chosen under a host-wide lock, and a want that something else now holds is an error
// that says so. Ensuring again is cheap and rewrites the chain.
func Ensure(ctx context.Context, dataDir string, pool netip.Prefix, port int, want netip.Prefix) (Network, error) {
	unlock, err := lock()
	if err != nil {
		return Network{}, err
	}
	defer unlock()
	n := Network{Bridge: BridgeName(dataDir), Chain: ChainName(dataDir)}
	if sub, ok := bridgeSubnet(n.Bridge); ok {
		n.Subnet = sub
		if want.IsValid() && want.Masked() != sub {
			return Network{}, fmt.Errorf("bridge %s has %s, but the cluster's guests are listed in %s", n.Bridge, sub, want.Masked())
		}
	} else {
		used, err := hostPrefixes()
		if err != nil {
			return Network{}, err
		}
		if want.IsValid() {
			n.Subnet = want.Masked()
			if i := slices.IndexFunc(used, n.Subnet.Overlaps); i >= 0 {
				return Network{}, fmt.Errorf("the cluster's guests are listed in %s, which %s on this host now overlaps: free it, or remove the guests and add them again", n.Subnet, used[i])
			}
		} else if n.Subnet, err = PickSubnet(pool, used); err != nil {
			return Network{}, err
		}
		gw := netip.PrefixFrom(Gateway(n.Subnet), 24)
		if err := run(ctx, "ip", "link", "add", n.Bridge, "type", "bridge"); err != nil {
			return Network{}, err
		}
		noIPv6(n.Bridge)
		for _, args := range [][]string{
			{"addr", "add", gw.String(), "dev", n.Bridge},
			{"link", "set", n.Bridge, "up"},
		} {
			if err := run(ctx, "ip", args...); err != nil {
				run(context.WithoutCancel(ctx), "ip", "link", "del", n.Bridge)
				return Network{}, err
			}
		}
	}
	n.Gateway = Gateway(n.Subnet)
	// The apiserver listens on loopback; a guest's connection to the gateway is NATed
	// there, which the kernel allows only on an interface with route_localnet.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+n.Bridge+"/route_localnet", []byte("1"), 0o644); err != nil {
		return Network{}, fmt.Errorf("bridge %s: %w", n.Bridge, err)
	}
	if err := writeChain(ctx, n, port); err != nil {
		return Network{}, err
	}
	return n, nil
}

// writeChain replaces the chain's rules in one iptables-restore transaction per table
// (--noflush touches no other chain): the bridge is never unfiltered, not even for the
// moment between a flush and the rules' return. The jumps into it are added once.
func writeChain(ctx context.Context, n Network, port int) error {
	ctx = context.WithoutCancel(ctx) // a half-written firewall is worse than a late one
	for _, table := range []string{"filter", "nat"} {
		rules := Rules(n.Bridge, port)
		if table == "nat" {
			rules = NATRules(n.Bridge, n.Gateway, port)
		}
		cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
		cmd.Stdin = strings.NewReader(RestoreInput(table, n.Chain, rules))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore of %s/%s: %w: %s", table, n.Chain, err, strings.TrimSpace(string(out)))
		}
	}
	for _, j := range Jumps(n.Bridge, n.Chain) {
		rule := append([]string{"-w", "-t", j[0]}, append([]string{"-C"}, j[1:]...)...)
		if run(ctx, "iptables", rule...) == nil {
			continue
		}
		if err := run(ctx, "iptables", append([]string{"-w", "-t", j[0], "-I"}, j[1:]...)...); err != nil {
			return err
		}
	}
	return nil
}

func chainExists(ctx context.Context, table, chain string) bool {
	return run(ctx, "iptables", "-w", "-t", table, "-n", "-L", chain) == nil
}

// Attach makes guest's veth: the host end on the bridge, the other end moved into the
// network namespace of pid (the guest's init, which renames it eth0).
func Attach(ctx context.Context, n Network, host, guest string, pid int) error {
	if err := run(ctx, "ip", "link", "add", host, "type", "veth", "peer", "name", guest); err != nil {
		return err
	}
	noIPv6(host)
	for _, args := range [][]string{
		{"link", "set", host, "master", n.Bridge},
		{"link", "set", host, "up"},
		{"link", "set", guest, "netns", strconv.Itoa(pid)},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			Detach(context.WithoutCancel(ctx), host)
			return err
		}
	}
	return nil
}

// Detach deletes a guest's veth by its host end (both ends go); one already gone (its
// namespace died with the guest) is no error, nor is one that goes while it is deleted
// (the kernel frees a dead namespace's links in its own time).
func Detach(ctx context.Context, host string) error {
	err := run(ctx, "ip", "link", "del", host)
	if _, gone := net.InterfaceByName(host); err != nil && gone != nil {
		return nil
	}
	return err
}

// Exists reports whether the cluster whose DataDir is dataDir has its bridge on the host.
func Exists(dataDir string) bool {
	_, err := net.InterfaceByName(BridgeName(dataDir))
	return err == nil
}

// noIPv6 turns IPv6 off on a host link of a guest network before it is up: the chain
// filters IPv4 only, and a guest must neither reach the host's IPv6 listeners through the
// link-local address nor give the host a route with a router advertisement. A host
// without IPv6 has nothing to turn off.
func noIPv6(link string) {
	os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/disable_ipv6", []byte("1"), 0o644)
}

// Remove takes the cluster's guest network away: the jumps, the chains and the bridge.
// What is already gone is no error.
func Remove(ctx context.Context, dataDir string) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	bridge, chain := BridgeName(dataDir), ChainName(dataDir)
	var errs []error
	for _, j := range Jumps(bridge, chain) {
		for run(ctx, "iptables", append([]string{"-w", "-t", j[0], "-D"}, j[1:]...)...) == nil {
		}
	}
	for _, table := range []string{"filter", "nat"} {
		if chainExists(ctx, table, chain) {
			errs = append(errs, run(ctx, "iptables", "-w", "-t", table, "-F", chain), run(ctx, "iptables", "-w", "-t", table, "-X", chain))
		}
	}
	if _, err := net.InterfaceByName(bridge); err == nil {
		errs = append(errs, run(ctx, "ip", "link", "del", bridge))
	}
	return errors.Join(errs...)
}

// LeftoversOf names what is left of the guest networks of the clusters whose DataDirs are
// dataDirs: their bridges, with any veth still on them, and their chains.
func LeftoversOf(ctx context.Context, dataDirs ...string) ([]string, error) {
	all, err := Leftovers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dataDirs {
		bridge, chain := BridgeName(d), ChainName(d)
		for _, l := range all {
			if strings.HasSuffix(l, " "+bridge) || strings.Contains(l, " "+chain) || strings.Contains(l, "master "+bridge) {
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// Leftovers names every link and iptables chain of this package on the host: after the
// last cluster's teardown there must be none.
func Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		for _, p := range []string{BridgePrefix, HostPrefix, GuestPrefix} {
			if strings.HasPrefix(i.Name, p) {
				out = append(out, "link "+i.Name)
			}
		}
	}
	for _, table := range []string{"filter", "nat"} {
		b, err := exec.CommandContext(ctx, "iptables", "-w", "-t", table, "-S").Output()
		if err != nil {
			continue // no iptables: nothing of ours can be there either
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, " "+ChainPrefix) || strings.HasPrefix(line, "-N "+ChainPrefix) {
				out = append(out, table+": "+line)
			}
		}
	}
	return out, nil
}

// LeftoversSince is Leftovers less what was there already (before, an earlier Leftovers):
// what one run left, on a host where a run killed earlier (a test binary, a provider)
// left its own.
func LeftoversSince(ctx context.Context, before []string) ([]string, error) {
	now, err := Leftovers(ctx)
	return slices.DeleteFunc(now, func(l string) bool { return slices.Contains(before, l) }), err
}

func bridgeSubnet(bridge string) (netip.Prefix, bool) {
	i, err := net.InterfaceByName(bridge)
	if err != nil {
		return netip.Prefix{}, false
	}
	addrs, _ := i.Addrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

// hostPrefixes is every IPv4 address (as its prefix) and main-table route of the host.
func hostPrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] == "Iface" {
			continue
		}
		dst, err1 := hex.DecodeString(fields[1])
		mask, err2 := hex.DecodeString(fields[7])
		if err1 != nil || err2 != nil || len(dst) != 4 || len(mask) != 4 {
			continue
		}
		bits := 0
		for m := binary.LittleEndian.Uint32(mask); m != 0; m >>= 1 {
			bits += int(m & 1)
		}
		if bits == 0 {
			continue // the default route overlaps everything; it is no clash
		}
		// The kernel prints the address as a host-order (little-endian) number.
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{dst[3], dst[2], dst[1], dst[0]}), bits).Masked())
	}
	return out, sc.Err()
}

func lock() (func(), error) {
	if err := os.MkdirAll("/run/socialweb-kcp", 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
