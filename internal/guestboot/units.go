package guestboot

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// unit is one running service of the guest image.
type unit struct {
	name string
	pid  int
	done chan struct{} // closed when it will not be restarted again
}

// supervisor runs the guest's units as systemd would with Restart=always: a unit that
// exits is started again after a pause that grows to 10 s.
type supervisor struct {
	c   Config
	r   *reaper
	log func(string, ...any)

	mu       sync.Mutex
	units    []*unit // in start order
	stopping bool
	stop     chan struct{} // closed by stopAll: no unit starts again
}

// argv is the unit's command line: the image's flags, then the user data's (the
// kubelet's KUBELET_EXTRA_ARGS from /etc/default/kubelet, as its systemd unit reads them).
func (s *supervisor) argv(name string) ([]string, error) {
	bin := filepath.Join(s.c.Bin, name)
	switch name {
	case "containerd":
		return []string{bin, "--config", ContainerdConfigPath}, nil
	case "kubelet":
		env, err := os.ReadFile("/etc/default/kubelet")
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		argv := []string{bin, "--config=" + KubeletConfigPath, "--node-ip=" + s.c.Address.Addr().String()}
		return append(argv, strings.Fields(EnvFile(env)["KUBELET_EXTRA_ARGS"])...), nil
	case "kube-proxy":
		return []string{bin, "--config=" + KubeProxyConfigPath}, nil
	}
	return nil, fmt.Errorf("unit %s: the guest has no such unit", name)
}

func (s *supervisor) env() []string {
	return []string{"PATH=" + s.c.Bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
}

// start starts the unit and keeps it running; containerd's start waits for its socket.
func (s *supervisor) start(ctx context.Context, name string) error {
	argv, err := s.argv(name)
	if err != nil {
		return err
	}
	logDir := filepath.Join(s.c.Dir, "log")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	u := &unit{name: name, done: make(chan struct{})}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		out.Close()
		return fmt.Errorf("unit %s: the guest is stopping", name)
	}
	pid, exited, err := s.r.start(argv, s.env(), out)
	if err == nil {
		u.pid = pid
		s.units = append(s.units, u)
	}
	s.mu.Unlock()
	if err != nil {
		out.Close()
		return err
	}
	s.log("guest %s: %s started (pid %d)", s.c.Name, name, pid)
	go s.keep(ctx, u, argv, out, exited)
	if name == "containerd" {
		return waitSocket(ctx, ContainerdSocket, time.Minute)
	}
	return nil
}

func (s *supervisor) keep(ctx context.Context, u *unit, argv []string, out *os.File, exited chan syscall.WaitStatus) {
	defer close(u.done)
	defer out.Close()
	backoff := time.Second
	for {
		ws := <-exited
		select {
		case <-s.stop:
			return
		default:
		}
		s.log("guest %s: %s exited (%v); starting it again in %s", s.c.Name, u.name, ws, backoff)
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
		// Started under the lock stopAll takes, so it either sees this pid or stops us
		// before the start.
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		pid, ch, err := s.r.start(argv, s.env(), out)
		if err == nil {
			u.pid, exited = pid, ch
		}
		s.mu.Unlock()
		if err != nil {
			s.log("guest %s: %v", s.c.Name, err)
			return
		}
	}
}

// importImages loads the guest's images into containerd's k8s.io namespace, the CRI's.
func (s *supervisor) importImages(ctx context.Context) error {
	for _, img := range s.c.Images {
		if err := s.r.command(ctx, filepath.Join(s.c.Bin, "ctr"), "--address", ContainerdSocket, "-n", "k8s.io", "images", "import", "--local", img); err != nil {
			return fmt.Errorf("guest %s: import %s: %w", s.c.Name, img, err)
		}
	}
	return nil
}

// stopAll stops the units in reverse order (the kubelet before containerd), each with 10 s
// to go, then kills everything else in the guest's PID namespace: the pods.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	units := append([]*unit(nil), s.units...)
	s.mu.Unlock()
	pidOf := func(u *unit) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return u.pid
	}
	for i := len(units) - 1; i >= 0; i-- {
		u := units[i]
		syscall.Kill(pidOf(u), syscall.SIGTERM)
		select {
		case <-u.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(pidOf(u), syscall.SIGKILL)
			select {
			case <-u.done:
			case <-time.After(5 * time.Second): // the kill(-1) below ends it
			}
		}
	}
	// PID 1 sending to -1 reaches every other process of its namespace. Anywhere else it
	// would reach every process the caller may signal: never.
	if os.Getpid() == 1 {
		syscall.Kill(-1, syscall.SIGKILL)
	}
}

func waitSocket(ctx context.Context, path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not answering after %s: %w", path, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
