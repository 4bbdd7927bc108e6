package measure

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/clusterprovider"
)

// Serve starts `socialweb-clusterprovider serve` from binDir on the data root, with the
// tenant ports and the extra flags given, as an operator runs it, and returns once it
// serves Clusters; stop ends it (it stops its clusters first, data kept). serve also ends
// when this program does, however it ends (Check exits).
func Serve(binDir, root, ports string, flags ...string) (stop func()) {
	return StartServe(binDir, root, ports, flags...).Stop
}

// Serving is a serve started by StartServe.
type Serving struct {
	Cmd        *exec.Cmd
	MetricsURL string // its /metrics
}

// StartServe is Serve, returning the process: a benchmark may kill it (-9) and start
// another on the same data root.
func StartServe(binDir, root, ports string, flags ...string) *Serving {
	args := append([]string{"serve", "--data-root", root, "--bin-dir", binDir, "--port-range", ports, "--metrics-address", "127.0.0.1:0"}, flags...)
	serve := exec.Command(filepath.Join(binDir, "socialweb-clusterprovider"), args...)
	out, err := serve.StdoutPipe()
	Check(err)
	serve.Stderr = io.Discard // its log; a failed start is told by its exit
	// A process group of its own, so that a reading of serve's group is serve's, not the
	// benchmark's too.
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	Check(serve.Start())
	s := &Serving{Cmd: serve}
	lines := bufio.NewScanner(out)
	serving := false
	for !serving && lines.Scan() {
		serving = strings.Contains(lines.Text(), "serving Clusters")
		if m, ok := strings.CutPrefix(lines.Text(), "metrics: "); ok {
			s.MetricsURL = m
		}
	}
	if !serving {
		serve.Wait()
		Check(fmt.Errorf("%s ended before it served Clusters (%v); run it by hand to see why", serve, serve.ProcessState))
	}
	go io.Copy(io.Discard, out)
	return s
}

// Stop ends serve as an operator does (SIGTERM) and waits for it.
func (s *Serving) Stop() {
	s.Cmd.Process.Signal(syscall.SIGTERM)
	s.Cmd.Wait()
}

// Kill ends serve with SIGKILL, as a crash does, and waits for it.
func (s *Serving) Kill() {
	s.Cmd.Process.Kill()
	s.Cmd.Wait()
}

// FreeAddr is a loopback address free now.
func FreeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Check(err)
	defer ln.Close()
	return ln.Addr().String()
}

// Operator is what serve's operator on a data root reaches on its front, as the CLI does
// (operator.kubeconfig, at 200 requests a second): the default namespace's Clusters and
// Secrets (each Cluster's delivered kubeconfig).
type Operator struct {
	Clusters dynamic.ResourceInterface
	Secrets  corev1client.SecretInterface
}

// OperatorOf is the operator of the serve on root.
func OperatorOf(root string) Operator {
	op, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, "operator.kubeconfig"))
	Check(err)
	op.QPS, op.Burst = 200, 400
	return Operator{
		Clusters: dynamic.NewForConfigOrDie(op).Resource(clusterprovider.ClustersResource).Namespace("default"),
		Secrets:  kubernetes.NewForConfigOrDie(op).CoreV1().Secrets("default"),
	}
}
