package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// The walkthrough of the README, through the real binaries: serve with its own front, then
// socialweb-kcp up (a live display of the phases and steps, the kubeconfig written), ls,
// nodes add|ls|rm, status, and down, which waits until nothing of the cluster is left.
func TestTheCLIWalkthrough(t *testing.T) {
	livetest.Start(t)
	bin := livetest.BinDir(t)
	lookup, err := clusterprovider.New(clusterprovider.Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: clusterstack.DefaultPostgresBin, Ports: portallocator.Range{First: 32000, Last: 32099}})
	if err != nil {
		t.Fatal(err)
	}
	programs := append(lookup.RequiredBinaries(), filepath.Join(bin, "socialweb-guest"))
	for _, b := range append(programs, filepath.Join(bin, "kubectl")) {
		if _, err := os.Stat(b); err != nil {
			livetest.Need(t, b+" is not installed; run deploy/install-components.sh")
		}
	}
	provider := livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-clusterprovider")
	cli := livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-kcp")
	root := livetest.DataRoot(t)
	serve, operator, _ := livetest.Serve(t, provider, bin, root, "32000-32099")
	work := t.TempDir()
	kcp := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "SOCIALWEB_KCP_KUBECONFIG="+operator)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("socialweb-kcp %s: exit %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
		return o.String(), e.String(), code
	}
	must := func(args ...string) string {
		t.Helper()
		out, _, code := kcp(args...)
		if code != 0 {
			t.Fatalf("socialweb-kcp %v: exit %d", args, code)
		}
		return out
	}

	if out := must("version"); !strings.Contains(out, "front: v1.") || !strings.Contains(out, " at https://127.0.0.1:32000") {
		t.Errorf("version: %s", out)
	}
	t0 := time.Now()
	out := must("up", "demo", "--timeout", "3m")
	t.Logf("up demo: Ready and kubeconfig written in %.2fs", time.Since(t0).Seconds())
	// The bring-up's steps in order: the wait follows a watch, which misses no status the
	// provider writes. (Steps that pass within a fraction of a second, kine's or the
	// CCM's, may share one status write: the loop's queue folds events of one cluster.)
	at := 0
	for _, want := range []string{"cluster demo declared in namespace default", "Initializing", "postgres ready, kine ready, kube-control-plane starting",
		"kube-control-plane ready, cloud-controller-manager starting", "Ready ", "kubeconfig written to demo.kubeconfig"} {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Errorf("up's output lacks %q after what came before it", want)
			continue
		}
		at += i + len(want)
	}
	kc := filepath.Join(work, "demo.kubeconfig")
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("demo.kubeconfig: %v %v; want mode 0600", fi, err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		b, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	if ns := kubectl("get", "ns"); !strings.Contains(ns, "kube-system") {
		t.Errorf("kubectl get ns with demo.kubeconfig: %s", ns)
	}

	lines := strings.Split(strings.TrimSpace(must("ls")), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME PHASE NODES AGE LAST-ACTIVE URL" {
		t.Fatalf("ls: %q", lines)
	}
	if f := strings.Fields(lines[1]); f[0] != "demo" || f[1] != "Ready" || f[2] != "0" || f[4] != "-" || !strings.HasPrefix(f[5], "https://127.0.0.1:320") {
		t.Errorf("ls row: %q", f)
	}

	// As a kubectl plugin: kubectl finds kubectl-kcp on PATH (install puts it in bin/,
	// beside socialweb-kcp) and runs it with the rest of the line.
	if _, err := os.Lstat(filepath.Join(bin, "kubectl-kcp")); err != nil {
		livetest.Need(t, bin+"/kubectl-kcp is not installed; run deploy/install-components.sh")
	}
	plugins := t.TempDir()
	if err := os.Symlink(cli, filepath.Join(plugins, "kubectl-kcp")); err != nil {
		t.Fatal(err)
	}
	plugin := exec.Command(filepath.Join(bin, "kubectl"), "kcp", "ls")
	plugin.Env = append(os.Environ(), "SOCIALWEB_KCP_KUBECONFIG="+operator, "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
	if b, err := plugin.CombinedOutput(); err != nil || !strings.Contains(string(b), "demo") || !strings.Contains(string(b), "NAME") {
		t.Errorf("kubectl kcp ls: %v\n%s", err, b)
	}

	out = must("nodes", "add", "demo", "2")
	for _, want := range []string{"node demo-n1 declared", "node demo-n2 declared", "demo-n1  Ready", "demo-n2  Ready", "Ready in cluster demo: demo-n1, demo-n2"} {
		if !strings.Contains(out, want) {
			t.Errorf("nodes add's output lacks %q", want)
		}
	}
	if out := must("up", "demo", "--nodes", "2"); !strings.Contains(out, "already declared") || strings.Contains(out, "demo-n3") {
		t.Errorf("a second up with --nodes 2 when it has 2: %s", out)
	}
	if got := kubectl("get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.providerID} {end}"); got != "demo-n1=socialweb://demo/demo-n1 demo-n2=socialweb://demo/demo-n2 " {
		t.Errorf("the tenant's nodes: %q", got)
	}
	if f := strings.Fields(strings.Split(must("nodes", "ls", "demo"), "\n")[1]); len(f) != 5 || f[0] != "demo-n1" || f[1] != "n1" || f[2] != "Ready" || f[3] != "socialweb://demo/demo-n1" {
		t.Errorf("nodes ls row: %q", f)
	}
	livetest.Eventually(t, time.Minute, "ls -o json: 2 nodes", func() (bool, string) {
		var l struct {
			Items []struct {
				Status struct {
					Phase string
					Nodes int
				}
			}
		}
		out := must("ls", "-o", "json")
		json.Unmarshal([]byte(out), &l)
		return len(l.Items) == 1 && l.Items[0].Status.Phase == "Ready" && l.Items[0].Status.Nodes == 2, out
	})
	if out := must("status", "demo"); !strings.Contains(out, "Phase:      Ready") || !strings.Contains(out, "demo-n2") {
		t.Errorf("status: %s", out)
	}

	// Bad input: a clear error, a non-zero exit, nothing declared.
	if _, stderr, code := kcp("status", "nosuch"); code != exitFailed || !strings.Contains(stderr, "cluster nosuch not found in namespace default") {
		t.Errorf("status nosuch: exit %d %q", code, stderr)
	}
	if _, stderr, code := kcp("up", "Bad_Name"); code != exitFailed || !strings.Contains(stderr, "metadata.name") {
		t.Errorf("up Bad_Name: exit %d %q", code, stderr)
	}
	if _, stderr, code := kcp("nodes", "rm", "demo", "n7"); code != exitFailed || !strings.Contains(stderr, `no node "n7"`) {
		t.Errorf("nodes rm demo n7: exit %d %q", code, stderr)
	}

	out = must("nodes", "rm", "demo", "n2")
	if !strings.Contains(out, "removed from cluster demo: demo-n2") || strings.Contains(kubectl("get", "nodes"), "demo-n2") {
		t.Errorf("nodes rm: %s", out)
	}

	// Parked: nothing runs, the port is free, the data stays; up brings it back with its
	// objects and its node.
	kubectl("create", "configmap", "kept", "--from-literal=k=v")
	// Its certificates, soonest first: every leaf has most of a year left.
	if out := must("certs", "demo", "--data-root", root); !strings.Contains(out, "pki/apiserver.crt") || !strings.Contains(out, "tenant.kubeconfig") || !strings.Contains(out, "CA ") {
		t.Errorf("certs demo: %s", out)
	}
	// The tenant's write is in its audit log, which audit shows from the DataDir.
	livetest.Eventually(t, time.Minute, "audit demo shows the ConfigMap's creation", func() (bool, string) {
		out := must("audit", "demo", "--data-root", root, "--tail", "30")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 7 && f[2] == "create" && f[3] == "configmaps" && f[5] == "kept" && f[6] == "201" {
				return true, out
			}
		}
		return false, out
	})
	dataDir := filepath.Join(root, "clusters", "demo")
	// ls --watch sees the park: the table, then demo's row again as it changes.
	watchOut := filepath.Join(t.TempDir(), "ls-watch.out")
	wf, err := os.Create(watchOut)
	if err != nil {
		t.Fatal(err)
	}
	lsWatch := exec.Command(cli, "ls", "--watch")
	lsWatch.Env = append(os.Environ(), "SOCIALWEB_KCP_KUBECONFIG="+operator)
	lsWatch.Stdout, lsWatch.Stderr = wf, wf
	if err := lsWatch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lsWatch.Process.Kill(); lsWatch.Wait(); wf.Close() })
	livetest.Eventually(t, time.Minute, "ls --watch lists demo Ready", func() (bool, string) {
		b, _ := os.ReadFile(watchOut)
		return strings.Contains(string(b), "Ready"), string(b)
	})
	t0 = time.Now()
	out = must("park", "demo")
	t.Logf("park demo: %.2fs", time.Since(t0).Seconds())
	livetest.Eventually(t, time.Minute, "ls --watch shows demo Ready, then Unavailable", func() (bool, string) {
		b, _ := os.ReadFile(watchOut)
		lines := strings.Split(string(b), "\n")
		return len(lines) > 2 && strings.HasPrefix(lines[0], "NAME") && strings.Contains(lines[1], "Ready") && strings.Contains(lines[len(lines)-2], "Unavailable"), string(b)
	})
	lsWatch.Process.Signal(syscall.SIGINT)
	if err := lsWatch.Wait(); err != nil {
		t.Errorf("ls --watch after Ctrl-C: %v; want exit 0", err)
	}
	if !strings.Contains(out, "processes stopped, port released, data kept") || !strings.Contains(out, "cluster demo is parked") {
		t.Errorf("park's output: %s", out)
	}
	if left, _ := processrunner.FindByMarker(dataDir+"/", programs); len(left) != 0 {
		t.Errorf("processes run while parked: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postgres")); err != nil {
		t.Errorf("the data went with the park: %v", err)
	}
	if f := strings.Fields(strings.Split(must("ls"), "\n")[1]); f[1] != "Unavailable" {
		t.Errorf("ls while parked: %q", f)
	}
	t0 = time.Now()
	if out := must("up", "demo"); !strings.Contains(out, "was parked; set running") || !strings.Contains(out, "is Ready at") {
		t.Errorf("up of a parked cluster: %s", out)
	}
	t.Logf("up demo from parked: %.2fs", time.Since(t0).Seconds())
	if got := kubectl("get", "configmap", "kept", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Errorf("the ConfigMap after park and up: %q", got)
	}
	livetest.Eventually(t, time.Minute, "demo-n1 Ready again", func() (bool, string) {
		out := must("nodes", "ls", "demo")
		return strings.Contains(out, "demo-n1  n1  Ready"), out
	})

	// A real guest in place of the simulated one: a pod that runs and prints, its logs,
	// exec into another, and an image of the tenant's own loaded into the guest.
	must("nodes", "rm", "demo", "n1")
	if out := must("nodes", "add", "demo", "--guest", "real"); !strings.Contains(out, "Ready in cluster demo: demo-n1") {
		t.Fatalf("nodes add demo --guest real: %s", out)
	}
	phase := func(pod string) func() (bool, string) {
		return func() (bool, string) {
			p := strings.TrimSpace(kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}"))
			// Why, when it is not: the kubelet's reason, or the container's.
			why := kubectl("get", "pod", pod, "-o", "jsonpath={.status.reason} {.status.message} {.status.containerStatuses}")
			return p == "Succeeded", p + " " + why
		}
	}
	kubectl("run", "hello", "--image="+guestimage.BusyboxImage, "--restart=Never", "--", "echo", "hello")
	livetest.Eventually(t, 2*time.Minute, "pod hello Succeeded", phase("hello"))
	if got := strings.TrimSpace(kubectl("logs", "hello")); got != "hello" {
		t.Errorf("kubectl logs hello: %q", got)
	}
	kubectl("run", "shell", "--image="+guestimage.BusyboxImage, "--", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	kubectl("wait", "--for=condition=Ready", "pod/shell", "--timeout=120s")
	// The kubelet may answer an exec before its container status is current: retried.
	livetest.Eventually(t, time.Minute, "kubectl exec shell -- hostname says shell", func() (bool, string) {
		b, err := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "exec", "shell", "--", "hostname").CombinedOutput()
		return err == nil && strings.TrimSpace(string(b)) == "shell", string(b)
	})
	bb, err := os.ReadFile(guestimage.BusyboxBinary)
	if err != nil {
		t.Fatal(err)
	}
	app, err := os.Create(filepath.Join(work, "app.tar"))
	if err != nil {
		t.Fatal(err)
	}
	guestimage.Write(app, guestimage.Image{Name: "example.local/app:1", Cmd: []string{"/bin/echo", "from app"}, Files: guestimage.Busybox(bb).Files})
	app.Close()
	if out := must("images", "load", "demo", "app.tar", "--data-root", root); !strings.Contains(out, "example.local/app:1 loaded into n1") {
		t.Errorf("images load: %s", out)
	}
	kubectl("run", "app", "--image=example.local/app:1", "--image-pull-policy=Never", "--restart=Never")
	livetest.Eventually(t, 2*time.Minute, "pod app Succeeded", phase("app"))
	if got := strings.TrimSpace(kubectl("logs", "app")); got != "from app" {
		t.Errorf("kubectl logs app: %q", got)
	}

	t0 = time.Now()
	out = must("down", "demo")
	t.Logf("down demo: gone in %.2fs", time.Since(t0).Seconds())
	for _, want := range []string{"Draining", "Deleted", "cluster demo is gone"} {
		if !strings.Contains(out, want) {
			t.Errorf("down's output lacks %q", want)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("the DataDir survived: %v", err)
	}
	if left, _ := processrunner.FindByMarker(dataDir+"/", programs); len(left) != 0 {
		t.Errorf("processes survived down: %v", left)
	}
	if left, _ := guestnet.LeftoversOf(context.Background(), dataDir); len(left) != 0 {
		t.Errorf("the real guest's network survived down: %v", left)
	}
	if _, stderr, _ := kcp("ls"); !strings.Contains(stderr, "no clusters") {
		t.Errorf("ls after down: %q", stderr)
	}

	serve.Cmd.Process.Signal(syscall.SIGINT)
	serve.WaitLine(t, "stopped; nothing is running")
}
