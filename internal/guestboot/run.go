package guestboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"socialweb.computer/kcp/internal/guestimage"
)

// Run boots the guest and keeps its units running until ctx ends; then it stops them in
// reverse order and kills whatever is left in the guest's PID namespace (the pods). It
// must be PID 1 of fresh mount, UTS, network and PID namespaces (the provider starts it so),
// so nothing it starts outlives it: when it exits, the kernel kills the rest.
func Run(ctx context.Context, c Config, log io.Writer) error {
	if os.Getpid() != 1 {
		return errors.New("socialweb-guest must be PID 1 of its own PID namespace (the provider starts it so)")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(log, format+"\n", a...) }
	r := newReaper()

	c, err := mountGuest(c)
	if err != nil {
		return fmt.Errorf("guest %s: mounts: %w", c.Name, err)
	}
	if err := unix.Sethostname([]byte(c.Name)); err != nil {
		return fmt.Errorf("guest %s: hostname: %w", c.Name, err)
	}
	if err := network(ctx, c, r); err != nil {
		return fmt.Errorf("guest %s: network: %w", c.Name, err)
	}
	ud, err := os.ReadFile(c.UserData)
	if err != nil {
		return fmt.Errorf("guest %s: %w", c.Name, err)
	}
	cc, err := Parse(ud)
	if err != nil {
		return fmt.Errorf("guest %s: %w", c.Name, err)
	}
	if err := cc.Write("/"); err != nil {
		return fmt.Errorf("guest %s: %w", c.Name, err)
	}
	var units []string
	for _, cmd := range cc.Runcmd {
		u, _ := Units(cmd) // Parse checked them
		units = append(units, u...)
	}
	if err := writeImageFiles(c); err != nil {
		return fmt.Errorf("guest %s: %w", c.Name, err)
	}
	logf("guest %s: user data applied: %d files; starting %s", c.Name, len(cc.WriteFiles), strings.Join(units, ", "))

	s := &supervisor{c: c, r: r, log: logf, stop: make(chan struct{})}
	defer s.stopAll()
	// containerd first: the kubelet and kube-proxy need it (the guest image's units say
	// After=containerd), and the images are imported before either starts.
	if err := s.start(ctx, "containerd"); err != nil {
		return err
	}
	if err := s.importImages(ctx); err != nil {
		return err
	}
	// A guest booting again (its cluster restarted) has the kubeconfig its kubelet wrote
	// at the first boot: the apiserver's port may have changed since, and the user data
	// of this boot says where it is now.
	if exists(KubeletKubeconfigPath) {
		if err := syncServer(KubeletKubeconfigPath, BootstrapKubeconfigPath); err != nil {
			return fmt.Errorf("guest %s: %w", c.Name, err)
		}
	}
	for _, u := range units {
		if u == "containerd" {
			continue
		}
		if err := s.start(ctx, u); err != nil {
			return err
		}
	}
	// kube-proxy runs as the Node, so it starts once the kubelet has its identity (TLS
	// bootstrapping writes the kubeconfig), as kubeadm's DaemonSet would start only on a
	// registered Node.
	go func() {
		// No deadline: a kubelet that has not bootstrapped keeps its Node from being
		// Ready, which is what the provider waits for and reports.
		for ctx.Err() == nil {
			err := waitFile(ctx, KubeletKubeconfigPath, time.Minute)
			if err == nil {
				err = syncServer(KubeletKubeconfigPath, BootstrapKubeconfigPath)
			}
			if err == nil {
				err = s.start(ctx, "kube-proxy")
				if err != nil && ctx.Err() == nil {
					logf("guest %s: %v", c.Name, err)
				}
				return
			}
			if ctx.Err() == nil {
				logf("guest %s: kube-proxy waits: %v", c.Name, err)
			}
		}
	}()
	logf("guest %s: up", c.Name)
	<-ctx.Done()
	logf("guest %s: stopping", c.Name)
	return nil
}

// GuestDir is where the guest sees its own directory: a bind mount made before /var is
// overlaid, so its state and logs land in the real directory whatever path the data root
// has (under /var, writes would otherwise go to the overlay).
const GuestDir = "/run/socialweb-guest"

// mountGuest gives the guest its own view of the host's filesystem: /etc and /var are
// overlays whose writes land in the guest's directory (the host's stay untouched),
// containerd's store is a plain directory of the guest's (its overlayfs snapshotter cannot
// sit on an overlay), /run is the guest's own, and /proc is its PID namespace's. It
// returns c with its paths as the guest sees them.
func mountGuest(c Config) (Config, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return c, fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return c, fmt.Errorf("/proc: %w", err)
	}
	if err := mkdirs(0o700, filepath.Join(c.Dir, "fs"), filepath.Join(c.Dir, "containerd")); err != nil {
		return c, err
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return c, fmt.Errorf("/run: %w", err)
	}
	if err := mkdirs(0o700, GuestDir); err != nil {
		return c, err
	}
	if err := unix.Mount(c.Dir, GuestDir, "", unix.MS_BIND, ""); err != nil {
		return c, fmt.Errorf("bind %s: %w", GuestDir, err)
	}
	rel, err := filepath.Rel(c.Dir, c.UserData)
	if err != nil || strings.HasPrefix(rel, "..") {
		return c, fmt.Errorf("UserData %s: want it inside Dir %s", c.UserData, c.Dir)
	}
	c.Dir, c.UserData = GuestDir, filepath.Join(GuestDir, rel)
	for _, o := range []string{"etc", "var"} {
		upper, work := filepath.Join(c.Dir, "fs", o), filepath.Join(c.Dir, "fs", o+".work")
		if err := mkdirs(0o755, upper, work); err != nil {
			return c, err
		}
		if err := unix.Mount("overlay", "/"+o, "overlay", 0, "lowerdir=/"+o+",upperdir="+upper+",workdir="+work); err != nil {
			return c, fmt.Errorf("overlay /%s: %w", o, err)
		}
	}
	if err := mkdirs(0o700, "/var/lib/containerd"); err != nil {
		return c, err
	}
	if err := unix.Mount(filepath.Join(c.Dir, "containerd"), "/var/lib/containerd", "", unix.MS_BIND, ""); err != nil {
		return c, fmt.Errorf("bind /var/lib/containerd: %w", err)
	}
	// The kubelet's volume mounts must propagate to the containers containerd starts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return c, fmt.Errorf("make / shared: %w", err)
	}
	return c, nil
}

func mkdirs(mode os.FileMode, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, mode); err != nil {
			return err
		}
	}
	return nil
}

// network waits for the veth end the provider moves in, names it eth0 and gives it the
// guest's address, a default route to the bridge (where the apiserver is reached) and the
// cluster's pod range on the link; the guest answers ARP for its own pods.
func network(ctx context.Context, c Config, r *reaper) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := net.InterfaceByName(c.Link); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link %s did not appear in the guest's namespace within a minute", c.Link)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", c.Link, "name", "eth0"},
		{"addr", "add", c.Address.String(), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", c.Gateway.String(), "dev", "eth0"},
		{"route", "add", c.ClusterPodCIDR.Masked().String(), "dev", "eth0"},
	} {
		if err := r.command(ctx, "ip", args...); err != nil {
			return err
		}
	}
	for file, v := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward":             "1",
		"/proc/sys/net/ipv4/conf/eth0/proxy_arp":    "1",
		"/proc/sys/net/ipv4/conf/all/rp_filter":     "0",
		"/proc/sys/net/ipv4/conf/eth0/rp_filter":    "0",
		"/proc/sys/net/ipv4/conf/default/rp_filter": "0",
	} {
		if err := os.WriteFile(file, []byte(v), 0o644); err != nil {
			return err
		}
	}
	// Bridged pod traffic through iptables, so a Service's answer from a pod on the same
	// bridge is un-NATed; without br_netfilter, kube-proxy masquerades instead.
	os.WriteFile(brNetfilter, []byte("1"), 0o644)
	return nil
}

// writeImageFiles writes what the guest image carries: containerd's, the CNI's and the
// kubelet's configuration.
func writeImageFiles(c Config) error {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	v1 := err != nil
	for path, b := range map[string][]byte{
		ContainerdConfigPath: ContainerdConfig(PauseImage, false),
		CNIConfigPath:        CNIConfig(c.PodCIDR),
		KubeletConfigPath:    KubeletConfig(c, "/etc/kubernetes/pki/ca.crt", v1),
		KubeProxyConfigPath:  KubeProxyConfig(c, KubeletKubeconfigPath, !exists(brNetfilter)),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

const brNetfilter = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// KubeletKubeconfigPath is where the kubelet writes its kubeconfig once bootstrapped
// (nodejoin.GuestKubeconfigPath: the user data's --kubeconfig).
const KubeletKubeconfigPath = "/etc/kubernetes/kubelet.conf"

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func waitFile(ctx context.Context, path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !exists(path) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not there after %s", path, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// PauseImage is the sandbox image the project builds.
const PauseImage = guestimage.PauseImage

// reaper is PID 1's duty: it reaps every child, its own units' and the orphans the
// containerd shims leave it, and hands each unit its exit status.
type reaper struct {
	mu    sync.Mutex
	exits map[int]chan syscall.WaitStatus
}

// newReaper listens for SIGCHLD before anything is forked, so no exit is missed.
func newReaper() *reaper {
	r := &reaper{exits: map[int]chan syscall.WaitStatus{}}
	sig := make(chan os.Signal, 64)
	signalNotifyChild(sig)
	go r.run(sig)
	return r
}

func (r *reaper) run(sig chan os.Signal) {
	for range sig {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			r.mu.Lock()
			if ch, ok := r.exits[pid]; ok {
				ch <- ws
				delete(r.exits, pid)
			}
			r.mu.Unlock()
		}
	}
}

// start forks argv with output to out; the returned channel gets its exit status.
func (r *reaper) start(argv []string, env []string, out *os.File) (int, chan syscall.WaitStatus, error) {
	r.mu.Lock() // held across the fork, so the reaper cannot reap the child before it is known
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{devNull(), out.Fd(), out.Fd()}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.exits[pid] = ch
	return pid, ch, nil
}

// command runs a one-off command to its end; its output is in the error when it fails.
func (r *reaper) command(ctx context.Context, name string, args ...string) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "cmd")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	_, ch, err := r.start(append([]string{path}, args...), os.Environ(), f)
	if err != nil {
		return err
	}
	select {
	case ws := <-ch:
		if ws.ExitStatus() != 0 {
			out, _ := os.ReadFile(f.Name())
			return fmt.Errorf("%s %s: exit %d: %s", name, strings.Join(args, " "), ws.ExitStatus(), strings.TrimSpace(string(out)))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var devNullFile *os.File

func devNull() uintptr {
	if devNullFile == nil {
		devNullFile, _ = os.Open(os.DevNull)
	}
	return devNullFile.Fd()
}
