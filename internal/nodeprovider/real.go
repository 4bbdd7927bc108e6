package nodeprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/guestboot"
	"socialweb.computer/kcp/internal/guestnet"
)

// Real is the node provider of real guests for one cluster: each guest is a set of
// namespaces on this host (mount, UTS, network, PID) whose init, socialweb-guest, boots it
// from the same #cloud-config user data a VM gets, then runs containerd, a kubelet and
// kube-proxy in it. Its veth sits on the cluster's bridge (internal/guestnet).
type Real struct {
	Cluster string
	DataDir string
	Bin     string // where socialweb-guest, containerd, kubelet... are
	Pool    netip.Prefix
	// APIServerPort is where the apiserver listens on loopback; a guest reaches it at its
	// bridge's gateway, NATed.
	APIServerPort int
	MaxPods       int
	// Images are the OCI archives every guest imports before its kubelet starts.
	Images func() ([]string, error)
	// Listed is the InternalIP of every guest in nodes.json.
	Listed func() ([]netip.Addr, error)
	// UserData makes the guest's #cloud-config: join material whose apiserver URL is
	// server, verified as serverName.
	UserData func(ctx context.Context, g Guest, server, serverName string) ([]byte, error)
	// Start starts the guest's init (argv) as PID 1 of new namespaces, supervised in a
	// group of its own, placed in cgroup (the guest's system group); it returns its pid.
	Start func(ctx context.Context, g Guest, argv []string) (int, error)
	// Stop stops the guest's init and waits until everything of it has exited.
	Stop func(g Guest) error
	// Running is whether the guest's init runs.
	Running func(g Guest) bool
	// CgroupRoot is the guest's pods' cgroup path for its kubelet; RemoveCgroups removes
	// what the kubelet made below it, in every hierarchy.
	CgroupRoot    func(g Guest) string
	RemoveCgroups func(g Guest) error

	mu       sync.Mutex
	reserved map[string]reservation // node id → address Place handed out, until Create
	creating map[string]bool        // node ids whose Create is under way
}

// reservation is an address Place handed out. One whose guest was never created (its
// listing failed) lapses after reservationTTL.
type reservation struct {
	addr netip.Addr
	at   time.Time
}

const reservationTTL = 5 * time.Minute

// ServerName is the name the guests verify the apiserver's certificate for: one it has
// always carried, whatever address the guests reach it at.
const ServerName = "kubernetes.default.svc"

// GuestsDirName is the directory of a cluster's DataDir that holds a directory per real
// guest (clusterstack.Layout.GuestsDir).
const GuestsDirName = "guests"

// Dir is guest nodeID's directory: its configuration, user data, state and logs.
func Dir(dataDir, nodeID string) string { return filepath.Join(dataDir, GuestsDirName, nodeID) }

// Place gives g its address on the cluster's bridge (making the bridge if it is the
// cluster's first real guest), before g is listed in nodes.json with it.
func (r *Real) Place(ctx context.Context, g Guest) (Guest, error) {
	listed, err := r.Listed()
	if err != nil {
		return g, err
	}
	n, err := guestnet.Ensure(ctx, r.DataDir, r.Pool, r.APIServerPort, subnetOf(listed))
	if err != nil {
		return g, fmt.Errorf("guest %s: network: %w", g.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reserved == nil {
		r.reserved = map[string]reservation{}
	}
	if x, ok := r.reserved[g.NodeID]; ok {
		g.InternalIP = x.addr
		return g, nil
	}
	used := slices.Clone(listed)
	for id, x := range r.reserved {
		if time.Since(x.at) > reservationTTL {
			delete(r.reserved, id)
			continue
		}
		used = append(used, x.addr)
	}
	a, err := guestnet.PickAddress(n.Subnet, used)
	if err != nil {
		return g, fmt.Errorf("guest %s: %w", g.Name, err)
	}
	r.reserved[g.NodeID] = reservation{addr: a, at: time.Now()}
	g.InternalIP = a
	return g, nil
}

// Create boots g: writes its configuration and user data (0600, in its 0700 directory),
// starts its init and moves its veth into its namespace.
func (r *Real) Create(ctx context.Context, g Guest) (err error) {
	if !g.InternalIP.IsValid() {
		return fmt.Errorf("guest %s: no address (Place it first)", g.Name)
	}
	// One Create of a guest at a time: two would both find it not running and start it
	// twice, the second's failure taking the first's veth and directory with it.
	r.mu.Lock()
	if r.creating == nil {
		r.creating = map[string]bool{}
	}
	if r.creating[g.NodeID] {
		r.mu.Unlock()
		return fmt.Errorf("guest %s is being created already", g.Name)
	}
	r.creating[g.NodeID] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.creating, g.NodeID)
		delete(r.reserved, g.NodeID)
		r.mu.Unlock()
	}()
	if r.Running(g) {
		return nil
	}
	// Whatever fails from here takes away what this Create made: for a new guest its
	// directory, veth and cgroups, and the bridge if no other guest has it; a guest booting
	// again keeps its directory (its kubelet's identity) and stays listed.
	dir := Dir(r.DataDir, g.NodeID)
	_, statErr := os.Stat(dir)
	fresh := os.IsNotExist(statErr)
	defer func() {
		if err != nil && fresh {
			err = errors.Join(err, r.cleanup(g))
		}
	}()
	n, err := guestnet.Ensure(ctx, r.DataDir, r.Pool, r.APIServerPort, netip.PrefixFrom(g.InternalIP, 24).Masked())
	if err != nil {
		return fmt.Errorf("guest %s: network: %w", g.Name, err)
	}
	images, err := r.Images()
	if err != nil {
		return fmt.Errorf("guest %s: %w", g.Name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ud, err := r.UserData(ctx, g, fmt.Sprintf("https://%s:%d", n.Gateway, r.APIServerPort), ServerName)
	if err != nil {
		return fmt.Errorf("guest %s: join material: %w", g.Name, err)
	}
	udPath := filepath.Join(dir, "user-data")
	if err := atomicfile.WriteFile(udPath, ud, 0o600); err != nil {
		return err
	}
	host, link := guestnet.VethNames(r.DataDir, g.NodeID)
	cfg := guestboot.Config{
		Name: g.Name, Bin: r.Bin, Dir: dir, UserData: udPath, Images: images, Link: link,
		Address: netip.PrefixFrom(g.InternalIP, n.Subnet.Bits()), Gateway: n.Gateway,
		PodCIDR: guestnet.PodCIDR(g.InternalIP), ClusterPodCIDR: guestnet.ClusterPodCIDR,
		ServiceCIDR: ServiceCIDR, CgroupRoot: r.CgroupRoot(g), MaxPods: r.MaxPods,
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("guest %s: %w", g.Name, err)
	}
	cfgPath := filepath.Join(dir, "guest.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := atomicfile.WriteFile(cfgPath, b, 0o600); err != nil {
		return err
	}
	pid, err := r.Start(ctx, g, []string{filepath.Join(r.Bin, "socialweb-guest"), "--config", cfgPath})
	if err != nil {
		return fmt.Errorf("guest %s: %w", g.Name, err)
	}
	if err := guestnet.Attach(ctx, n, host, link, pid); err != nil {
		return errors.Join(fmt.Errorf("guest %s: %w", g.Name, err), r.Stop(g))
	}
	return nil
}

// subnetOf is the /24 the listed guests' addresses are in (real guests of one cluster
// share one), or none.
func subnetOf(listed []netip.Addr) netip.Prefix {
	if len(listed) == 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(listed[0], 24).Masked()
}

// ServiceCIDR is the tenant's Service range (clusterstack's default), which kube-proxy
// serves in each guest.
var ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")

// Delete stops g (its units, then everything in its namespaces), and removes its veth,
// its cgroups and its directory; the cluster's last real guest takes the bridge with it.
func (r *Real) Delete(ctx context.Context, g Guest) error {
	if err := r.Stop(g); err != nil {
		return fmt.Errorf("guest %s: stop: %w", g.Name, err)
	}
	return r.cleanup(g)
}

func (r *Real) cleanup(g Guest) error {
	host, _ := guestnet.VethNames(r.DataDir, g.NodeID)
	err := errors.Join(guestnet.Detach(context.Background(), host), r.RemoveCgroups(g), os.RemoveAll(Dir(r.DataDir, g.NodeID)))
	if err != nil {
		return err
	}
	// The bridge goes with the last guest, unless another is being placed or created
	// (it holds a reservation or a Create mark until its directory exists); the check and
	// the removal are under the lock those take.
	r.mu.Lock()
	defer r.mu.Unlock()
	left, err := r.dirs()
	if err != nil {
		return err
	}
	for id := range r.reserved {
		if id != g.NodeID {
			left = append(left, id)
		}
	}
	for id := range r.creating {
		if id != g.NodeID {
			left = append(left, id)
		}
	}
	if len(left) == 0 {
		return guestnet.Remove(context.Background(), r.DataDir)
	}
	return nil
}

func (r *Real) dirs() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(r.DataDir, GuestsDirName))
	if os.IsNotExist(err) {
		return nil, nil
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, err
}

// Has reports whether nodeID is a real guest of this cluster (its directory exists).
func (r *Real) Has(nodeID string) bool {
	_, err := os.Stat(Dir(r.DataDir, nodeID))
	return err == nil
}

// List returns the real guests whose init runs.
func (r *Real) List(ctx context.Context) ([]Guest, error) {
	ids, err := r.dirs()
	if err != nil {
		return nil, fmt.Errorf("list real guests of %s: %w", r.Cluster, err)
	}
	var out []Guest
	for _, id := range ids {
		g, err := NewGuest(r.Cluster, id)
		if err == nil && r.Running(g) {
			out = append(out, g)
		}
	}
	return out, nil
}
