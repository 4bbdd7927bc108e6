package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
)

// liveBinary builds this command for a live test, once the installed components it needs
// are there (else the test fails or skips: invariant 19). It returns the executable and the
// bin dir.
func liveBinary(t *testing.T, needs ...string) (exe, bin string) {
	t.Helper()
	livetest.Start(t)
	bin = livetest.BinDir(t)
	for _, b := range needs {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			livetest.Need(t, bin+"/"+b+" is not installed; run deploy/install-components.sh")
		}
	}
	exe = filepath.Join(t.TempDir(), "socialweb-clusterprovider")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return exe, bin
}

// running is the provider started by a live test, its stdout as lines.
type running struct {
	cmd   *exec.Cmd
	lines chan string
}

func startProvider(t *testing.T, exe string, args ...string) *running {
	t.Helper()
	cmd := exec.Command(exe, args...)
	pipe, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := &running{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	return r
}

// waitLine reads the provider's output until a line contains what, and returns that line.
func (r *running) waitLine(t *testing.T, what string) string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the provider ended before printing %q", what)
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

func eventually(t *testing.T, within time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	livetest.Eventually(t, within, what, check)
}

// startServe starts "serve" with its own front under root, its apiservers in ports, and
// returns it with a kubectl bound to its operator kubeconfig and its /metrics URL.
func startServe(t *testing.T, exe, bin, root, ports string) (r *running, kubectl func(args ...string) string, metricsURL string) {
	t.Helper()
	r = startProvider(t, exe, "serve", "--data-root", root, "--bin-dir", bin, "--port-range", ports, "--metrics-address", "127.0.0.1:0")
	metricsURL = strings.TrimPrefix(r.waitLine(t, "metrics: "), "metrics: ")
	r.waitLine(t, "serving Clusters")
	op := filepath.Join(root, "operator.kubeconfig")
	return r, func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", op}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}, metricsURL
}
