package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
)

// --apiserver-bind-address: the tenant apiserver listens on that address only, its
// kubeconfig names it, its certificate carries it, and kubectl on another host (a network
// namespace that reaches only that address) uses the cluster with that kubeconfig.
func TestABoundAddressServesAnotherHost(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	other := livetest.OtherHost(t)
	root := livetest.DataRoot(t)
	r := startProvider(t, exe, "up", "w", "--data-root", root, "--bin-dir", bin, "--port-range", "31991-31999",
		"--apiserver-bind-address", other.HostIP)
	kc := strings.TrimSpace(strings.TrimPrefix(r.WaitLine(t, "tenant kubeconfig: "), "tenant kubeconfig: "))
	r.WaitLine(t, "press Ctrl-C")
	raw, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	var port string
	for _, l := range strings.Split(string(raw), "\n") {
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), "server: https://"+other.HostIP+":"); ok {
			port = u
		}
	}
	if port == "" {
		t.Fatalf("the tenant kubeconfig does not name %s:\n%s", other.HostIP, raw)
	}
	out, err := other.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "--request-timeout", "60s", "get", "ns", "default", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "namespace/default" {
		t.Fatalf("kubectl from the other host: %v\n%s", err, out)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the apiserver also listens on 127.0.0.1:%s; want %s only", port, other.HostIP)
	}
	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "nothing of it is running")
	if err := r.Cmd.Wait(); err != nil {
		t.Fatalf("exit after Ctrl-C: %v", err)
	}
}
