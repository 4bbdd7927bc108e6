package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Host is a network namespace standing for another machine: it reaches this host only
// through one veth pair, at HostIP, and resolves names through its own hosts file.
type Host struct {
	Name           string // the namespace, as ip netns knows it
	HostIP, PeerIP string // this host's end of the pair, and the namespace's
}

// OtherHost makes a Host, its hosts file mapping each of names to this host's end of the
// pair, and removes it all when t ends. It needs root and iproute2.
func OtherHost(t testing.TB, names ...string) *Host {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		Need(t, "iproute2's ip is not installed (apt-get install iproute2)")
	}
	// A /28 per test process, in a block nothing here routes: parallel packages differ.
	n := os.Getpid() % 16000
	subnet := fmt.Sprintf("10.%d.%d.", 200+n/4096, n/16%256)
	h := &Host{Name: fmt.Sprintf("kcp-lt-%d", os.Getpid()),
		HostIP: subnet + fmt.Sprint(n%16*16+1), PeerIP: subnet + fmt.Sprint(n%16*16+2)}
	hostEnd, peerEnd := fmt.Sprintf("kcpl%dh", os.Getpid()), fmt.Sprintf("kcpl%dn", os.Getpid())
	dir := filepath.Join("/etc/netns", h.Name)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostEnd).Run()
		exec.Command("ip", "netns", "del", h.Name).Run()
		os.RemoveAll(dir)
	})
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for _, name := range names {
		fmt.Fprintf(&hosts, "%s %s\n", h.HostIP, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"netns", "add", h.Name},
		{"link", "add", hostEnd, "type", "veth", "peer", "name", peerEnd},
		{"link", "set", peerEnd, "netns", h.Name},
		{"addr", "add", h.HostIP + "/28", "dev", hostEnd},
		{"link", "set", hostEnd, "up"},
		{"-n", h.Name, "addr", "add", h.PeerIP + "/28", "dev", peerEnd},
		{"-n", h.Name, "link", "set", peerEnd, "up"},
		{"-n", h.Name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return h
}

// Command is argv run inside the namespace (ip netns exec, which also mounts its hosts file).
func (h *Host) Command(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name}, argv...)...)
}
