package livetest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Build builds the command pkg (an import path) into the test's temp dir and returns the
// executable.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", exe, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return exe
}

// Proc is a long-running process a live test started, its standard output as lines; it is
// killed when the test ends.
type Proc struct {
	Cmd   *exec.Cmd
	lines chan string
}

// Run starts exe with args; its standard error goes to the test's.
func Run(t testing.TB, exe string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(exe, args...)
	pipe, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Stopped as an operator stops it, so that it stops what it started (a provider killed
	// outright leaves its groups for the next one to reap, and a test has no next one);
	// killed only when that does not end it in two minutes.
	t.Cleanup(func() {
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-exited
		}
	})
	p := &Proc{Cmd: cmd, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// WaitLine reads the output until a line contains what, and returns that line.
func (p *Proc) WaitLine(t testing.TB, what string) string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s ended before printing %q", filepath.Base(p.Cmd.Path), what)
			}
			t.Log(l)
			if strings.Contains(l, what) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q within 3 minutes", what)
		}
	}
}

// Serve starts "socialweb-clusterprovider serve" (exe) with its own front under root, its
// apiservers in ports, and returns it with the operator kubeconfig and the /metrics URL.
func Serve(t testing.TB, exe, bin, root, ports string, extra ...string) (p *Proc, operatorKubeconfig, metricsURL string) {
	t.Helper()
	p = Run(t, exe, append([]string{"serve", "--data-root", root, "--bin-dir", bin, "--port-range", ports, "--metrics-address", "127.0.0.1:0"}, extra...)...)
	metricsURL = strings.TrimPrefix(p.WaitLine(t, "metrics: "), "metrics: ")
	p.WaitLine(t, "serving Clusters")
	return p, filepath.Join(root, "operator.kubeconfig"), metricsURL
}

// MetricValue reads one series' value from a /metrics page; 0 when it is not there.
func MetricValue(t testing.TB, url, series string) float64 {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	var v float64
	fmt.Sscan(string(m[1]), &v)
	return v
}
