package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

// GuestBinaries are what a real guest runs, from the provider's bin directory; a missing
// one is named by the first real guest's creation, with the install command.
var GuestBinaries = []string{"socialweb-guest", "socialweb-pause", "containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kube-proxy"}

// realJoinTTL is how long a real guest's join token lives: its kubelet uses it within
// seconds, and it is useless once the kubelet has its own certificate.
const realJoinTTL = 10 * time.Minute

// realGuestGrace is how long a guest's init has to stop its units before SIGKILL.
const realGuestGrace = 30 * time.Second

// realGuests is the cluster's provider of real guests, made once.
func (c *Cluster) realGuests() *nodeprovider.Real {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	if c.real != nil {
		return c.real
	}
	s := c.Spec
	c.real = &nodeprovider.Real{
		Cluster: c.Name, DataDir: s.DataDir, Bin: s.BinDir, Pool: c.p.guestPool(),
		APIServerPort: s.APIServerPort, MaxPods: c.podsPerNode(),
		Images: func() ([]string, error) {
			b, err := guestimage.Build(filepath.Join(c.p.cfg.DataRoot, "images"), s.Bin("socialweb-pause"))
			if err != nil {
				return nil, err
			}
			loaded, err := loadedArchives(s.DataDir)
			return append(b.Archives(), loaded...), err
		},
		Listed: func() ([]netip.Addr, error) {
			list, err := c.Instances()
			if err != nil {
				return nil, err
			}
			var out []netip.Addr
			for _, in := range list {
				for _, a := range in.Addresses {
					if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == "InternalIP" {
						out = append(out, ip)
					}
				}
			}
			return out, nil
		},
		UserData: func(ctx context.Context, g nodeprovider.Guest, server, serverName string) ([]byte, error) {
			jm, err := c.joinMaterial(ctx, g.NodeID, realJoinTTL, server, serverName, nodeprovider.KindReal)
			return jm.UserData, err
		},
		Start:   c.startGuest,
		Stop:    c.stopGuest,
		Running: func(g nodeprovider.Guest) bool { return c.guestGroup(g.NodeID) != nil },
		CgroupRoot: func(g nodeprovider.Guest) string {
			return c.p.cfg.Cgroups.Group(c.Name, "nodes", g.NodeID, "pods").KubeletRoot()
		},
		RemoveCgroups: func(g nodeprovider.Guest) error {
			return c.p.cfg.Cgroups.Group(c.Name, "nodes", g.NodeID).RemoveEverywhere()
		},
	}
	return c.real
}

func (p *Provider) guestPool() netip.Prefix {
	if p.cfg.GuestPool.IsValid() {
		return p.cfg.GuestPool
	}
	return guestnet.DefaultPool
}

func (c *Cluster) guestGroup(nodeID string) *procgroup.Group {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	return c.guests[nodeID]
}

// guestOptions are a real guest's group's: its own record directory under run/guests/.
func (p *Provider) guestOptions(s clusterstack.Spec, nodeID string) procgroup.Options {
	o := p.groupOptions(s)
	o.RecordDir = s.Layout().GuestRunDir(nodeID)
	o.Marker = nodeprovider.Dir(s.DataDir, nodeID) + string(filepath.Separator)
	o.Programs = []string{s.Bin("socialweb-guest")}
	o.Grace = realGuestGrace
	return o
}

// reapGuestSurvivors reaps the real guests an earlier run of s left running (each one's
// init; the kernel takes the rest of its PID namespace with it), their cgroups and the
// cluster's guest network. Their directories stay: the guests are still listed.
func (p *Provider) reapGuestSurvivors(s clusterstack.Spec) error {
	ents, err := os.ReadDir(s.Layout().GuestsRunDir())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if _, err := procgroup.ReapSurvivors(p.guestOptions(s, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		if p.cfg.Cgroups != nil {
			errs = append(errs, p.cfg.Cgroups.Group(s.Name, "nodes", e.Name()).RemoveEverywhere())
		}
	}
	errs = append(errs, guestnet.Remove(context.Background(), s.DataDir))
	return errors.Join(errs...)
}

// startGuest starts a real guest's init as PID 1 of new mount, UTS, network and PID
// namespaces, in the guest's own cgroup below the cluster's node group; its pods' cgroup
// (the kubelet's cgroupRoot) is made beside it.
func (c *Cluster) startGuest(ctx context.Context, g nodeprovider.Guest, argv []string) (int, error) {
	if c.p.cfg.Cgroups == nil {
		return 0, errors.New("real guests need control groups (serve --cgroups): each guest's kubelet needs a cgroup root of its own")
	}
	for _, b := range GuestBinaries {
		if err := checkBinary(c.Spec.Bin(b)); err != nil {
			return 0, err
		}
	}
	if err := raiseInotifyLimits(); err != nil {
		return 0, err
	}
	system := c.p.cfg.Cgroups.Group(c.Name, "nodes", g.NodeID, "system")
	pods := c.p.cfg.Cgroups.Group(c.Name, "nodes", g.NodeID, "pods")
	if err := system.Create(cgroups.Limits{}); err != nil {
		return 0, err
	}
	if err := pods.Create(cgroups.Limits{}); err != nil {
		return 0, err
	}
	if err := pods.PrepareForKubelet(); err != nil {
		return 0, err
	}
	spec := componentSpec(c.Spec, procgroup.ComponentGuest, argv)
	spec.Prefix = g.Name
	spec.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	spec.Cgroup = system
	spec.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC
	step := procgroup.Step{
		Name: procgroup.ComponentGuest, Spec: spec,
		// The guest is proven by its Node (Ready and initialized), which AddNode and the
		// reconcile loop wait for; its veth can only be moved in once it has started.
		Ready: func(context.Context) error { return nil },
	}
	opts := c.p.guestOptions(c.Spec, g.NodeID)
	if err := os.MkdirAll(opts.RecordDir, 0o700); err != nil {
		return 0, err
	}
	if c.guestGroup(g.NodeID) != nil {
		return 0, fmt.Errorf("guest %s runs already", g.Name)
	}
	grp, err := procgroup.Spawn(ctx, opts, []procgroup.Step{step})
	if err != nil {
		return 0, err
	}
	// A Stop that began while this guest was starting has already stopped the guests it
	// knew of: this one goes at once rather than outlive its cluster.
	c.nodesMu.Lock()
	if c.guestsClosed {
		c.nodesMu.Unlock()
		return 0, errors.Join(fmt.Errorf("guest %s: cluster %s is stopping", g.Name, c.Name), grp.Reap())
	}
	if c.guests == nil {
		c.guests = map[string]*procgroup.Group{}
	}
	c.guests[g.NodeID] = grp
	delete(c.guestExits, g.NodeID)
	c.nodesMu.Unlock()
	// A guest whose init exits is not the control plane's failure (its Node goes
	// NotReady, as a VM's would): it is told to whoever waits for the guest to join.
	go func() {
		select {
		case ex := <-grp.Exited():
			c.nodesMu.Lock()
			if c.guests[g.NodeID] == grp {
				if c.guestExits == nil {
					c.guestExits = map[string]procgroup.Exit{}
				}
				c.guestExits[g.NodeID] = ex
			}
			c.nodesMu.Unlock()
		case <-c.stopping:
		}
	}()
	return grp.Members()[0].Identity.Pid, nil
}

// inotifyLimits are the host's inotify limits real guests need: every guest's kubelet,
// containerd and kube-proxy run as root and hold inotify instances, and the kernel's
// default of 128 instances per user runs out at about six guests beside ten clusters
// (kube-proxy and the kubelet then exit with "too many open files"), as kind documents
// for its nodes.
var inotifyLimits = map[string]int64{
	"/proc/sys/fs/inotify/max_user_instances": 8192,
	"/proc/sys/fs/inotify/max_user_watches":   524288,
}

// raiseInotifyLimits raises each limit to at least its value; it never lowers one.
func raiseInotifyLimits() error {
	for path, want := range inotifyLimits {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("real guests: %w", err)
		}
		have, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if have >= want {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.FormatInt(want, 10)), 0o644); err != nil {
			return fmt.Errorf("real guests: raise %s from %d to %d: %w", path, have, want, err)
		}
	}
	return nil
}

// guestKind is the kind of the existing guest nodeID.
func (c *Cluster) guestKind(nodeID string) string {
	if c.realGuests().Has(nodeID) {
		return nodeprovider.KindReal
	}
	return nodeprovider.KindKwok
}

// guestExited is why the real guest nodeID's init exited, or nil while it runs (or for a
// simulated guest).
func (c *Cluster) guestExited(nodeID string) error {
	c.nodesMu.Lock()
	ex, ok := c.guestExits[nodeID]
	c.nodesMu.Unlock()
	if !ok {
		return nil
	}
	msg := fmt.Sprintf("guest %s: its init exited (%v)", nodeID, ex.Err)
	if len(ex.Tail) > 0 {
		msg += ": " + ex.Tail[len(ex.Tail)-1]
	}
	return errors.New(msg)
}

// stopGuest stops a real guest's init, which stops its units and then everything else in
// its namespaces; any survivor its record names is reaped too.
func (c *Cluster) stopGuest(g nodeprovider.Guest) error {
	c.nodesMu.Lock()
	grp := c.guests[g.NodeID]
	delete(c.guests, g.NodeID)
	c.nodesMu.Unlock()
	if grp != nil {
		return grp.Reap()
	}
	_, err := procgroup.ReapSurvivors(c.p.guestOptions(c.Spec, g.NodeID))
	return err
}

func checkBinary(path string) error {
	if err := syscall.Access(path, 1); err != nil {
		return fmt.Errorf("%s: %w; install it: bash deploy/install-components.sh", path, err)
	}
	return nil
}

// restartGuests brings back the guests an earlier run listed: kwok for simulated ones,
// each real one booted again from its directory at its listed address.
func (c *Cluster) restartGuests(ctx context.Context, list []instancesnapshot.Instance) error {
	real := c.realGuests()
	simulated := false
	for _, in := range list {
		if !real.Has(in.NodeID) {
			simulated = true
			continue
		}
		g, err := nodeprovider.NewGuest(c.Name, in.NodeID)
		if err != nil {
			return err
		}
		for _, a := range in.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == "InternalIP" {
				g.InternalIP = ip
			}
		}
		if err := real.Create(ctx, g); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	if simulated {
		return c.startNodeGroup(ctx)
	}
	return nil
}

// stopRealGuests stops every real guest of the cluster (their directories stay, for the
// next start) and takes their cgroups and the cluster's guest network away.
func (c *Cluster) stopRealGuests() error {
	c.nodesMu.Lock()
	c.guestsClosed = true // no guest starts after this listing
	ids := slices.Collect(maps.Keys(c.guests))
	c.nodesMu.Unlock()
	if len(ids) == 0 && !guestnet.Exists(c.Spec.DataDir) {
		return nil // no real guest ran (a failed restart may still have made the bridge)
	}
	var errs []error
	for _, id := range ids {
		g, _ := nodeprovider.NewGuest(c.Name, id)
		if err := c.stopGuest(g); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, c.p.cfg.Cgroups.Group(c.Name, "nodes", id).RemoveEverywhere())
	}
	errs = append(errs, guestnet.Remove(context.Background(), c.Spec.DataDir))
	return errors.Join(errs...)
}

// realGuestCount is how many real guests the cluster whose DataDir is dataDir has (each
// has a directory until its removal).
func realGuestCount(dataDir string) int {
	ents, _ := os.ReadDir(clusterstack.Layout{Root: dataDir}.GuestsDir())
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}
