package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// serveProc is one run of "socialweb-clusterprovider serve": its stdout kept as lines to
// wait on, its stderr (the loop's log) in a file whose tail a failure shows.
type serveProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

func (s *serveProc) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.out)
}

// declared is what the test asked of one cluster.
type declared int

const (
	running declared = iota
	parked
	absent
)

func (d declared) String() string { return [...]string{"running", "parked", "absent"}[d] }

// harness drives one provider and its clusters, and checks them against what it declared.
type harness struct {
	t               *testing.T
	exe, bin, root  string
	ports           string
	names           []string
	want            []declared
	acked           []map[string]string // per cluster: ConfigMap name → value, every write acknowledged
	writes          int
	serve           *serveProc
	serveRuns       int
	front           dynamic.Interface
	frontKube       kubernetes.Interface
	programs        []string
	outlived, twice int
	lostObjects     int
}

func newHarness(t *testing.T, exe, bin, root, ports string, clusters int) *harness {
	h := &harness{t: t, exe: exe, bin: bin, root: root, ports: ports}
	for i := range clusters {
		h.names = append(h.names, fmt.Sprintf("f%d", i))
		h.want = append(h.want, absent)
		h.acked = append(h.acked, map[string]string{})
	}
	h.programs = livetest.StackPrograms(bin)
	// However the test ends, nothing of it is left running: its serve is killed by its own
	// cleanup (registered later, so run first), then whatever its groups still run; and
	// nothing of it is left in the host's control groups.
	t.Cleanup(func() {
		kill9(h.all(), true)
		removeCgroups(t, root)
	})
	return h
}

// removeCgroups removes the control groups serve made for the test's clusters on the data
// root. A serve killed with -9 cannot, and no later serve on this data root, which would,
// is ever started.
func removeCgroups(t *testing.T, root string) {
	h, err := cgroups.Detect(cgroups.Mount, clusterprovider.CgroupSubtree(root))
	if err != nil {
		return // no control groups on this host: serve made none
	}
	g := h.Group() // the provider's whole subtree
	deadline := time.Now().Add(30 * time.Second)
	for g.Exists() {
		err := g.Remove()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the test's control groups (%s) are left: %v", clusterprovider.CgroupSubtree(root), err)
			return
		}
		// Killed processes still exiting, or one the harness did not know of.
		procs, _ := g.Procs()
		for _, pid := range procs {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const postgresBinary = livetest.PostgresBinary

// startServe starts serve and waits until it serves; serve's stderr goes to a log file.
func (h *harness) startServe() {
	h.t.Helper()
	h.serveRuns++
	logPath := filepath.Join(h.root, fmt.Sprintf("serve-%d.log", h.serveRuns))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(h.exe, "serve", "--data-root", h.root, "--bin-dir", h.bin, "--port-range", h.ports, "--metrics-address", "127.0.0.1:0")
	cmd.Stderr = logf
	pipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			s.out = append(s.out, sc.Text())
			s.mu.Unlock()
		}
		cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	h.t.Cleanup(func() { cmd.Process.Kill(); <-s.done })
	h.serve = s
	h.waitLine("serving Clusters", 3*time.Minute)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(h.root, "operator.kubeconfig"))
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	h.front = dynamic.NewForConfigOrDie(cfg)
	h.frontKube = kubernetes.NewForConfigOrDie(cfg)
}

// waitLine waits for serve to print a line containing what; it fails if serve ends first.
func (h *harness) waitLine(what string, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, l := range h.serve.lines() {
			if strings.Contains(l, what) {
				return
			}
		}
		select {
		case <-h.serve.done:
			for _, l := range h.serve.lines() {
				if strings.Contains(l, what) {
					return
				}
			}
			h.fatalf("serve ended (%v) before printing %q; its output: %q", h.serve.cmd.ProcessState, what, h.serve.lines())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.fatalf("serve did not print %q within %s; its output: %q", what, within, h.serve.lines())
		}
	}
}

// waitExit waits for serve to end and returns how.
func (h *harness) waitExit(within time.Duration) *os.ProcessState {
	h.t.Helper()
	select {
	case <-h.serve.done:
		return h.serve.cmd.ProcessState
	case <-time.After(within):
		h.fatalf("serve did not exit within %s", within)
		return nil
	}
}

// fatalf fails with the tail of serve's log, which says what the provider was doing.
func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	if h.serve != nil {
		if b, err := os.ReadFile(h.serve.log); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			h.t.Logf("serve's log, last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	// Who holds the range's ports, and what those processes are: a port found taken is
	// otherwise a guess.
	if out, err := exec.Command("ss", "-tanpH", "sport", ">=", ":"+strings.Split(h.ports, "-")[0], "and", "sport", "<=", ":"+strings.Split(h.ports, "-")[1]).CombinedOutput(); err == nil {
		h.t.Logf("sockets on %s (ss -tanp):\n%s", h.ports, out)
	}
	if out, err := exec.Command("ps", "-eo", "pid,ppid,stat,lstart,args", "--sort", "pid").CombinedOutput(); err == nil {
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, h.root) {
				keep = append(keep, l)
			}
		}
		h.t.Logf("processes under %s:\n%s", h.root, strings.Join(keep, "\n"))
	}
	h.t.Fatalf(format, args...)
}

func (h *harness) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// --- declaring ---

func (h *harness) create(i int) {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	name := h.names[i]
	clusters := h.front.Resource(clusterprovider.ClustersResource).Namespace("default")
	nodes := h.front.Resource(clusterprovider.NodesResource).Namespace("default")
	if _, err := clusters.Create(ctx, v1alpha1.Object("Cluster", name, map[string]any{"account": "faults"}), metav1.CreateOptions{}); err != nil {
		h.fatalf("create Cluster %s: %v", name, err)
	}
	if _, err := nodes.Create(ctx, v1alpha1.Object("Node", name+"-n1", map[string]any{"cluster": name, "nodeID": "n1"}), metav1.CreateOptions{}); err != nil {
		h.fatalf("create Node %s-n1: %v", name, err)
	}
	h.want[i], h.acked[i] = running, map[string]string{}
}

// delete deletes cluster i's Node and Cluster; the provider tears them down.
func (h *harness) delete(i int) {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	name := h.names[i]
	for _, d := range []struct {
		r    dynamic.NamespaceableResourceInterface
		name string
	}{{h.front.Resource(clusterprovider.NodesResource), name + "-n1"}, {h.front.Resource(clusterprovider.ClustersResource), name}} {
		if err := d.r.Namespace("default").Delete(ctx, d.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			h.fatalf("delete %s: %v", d.name, err)
		}
	}
	h.want[i], h.acked[i] = absent, map[string]string{}
}

func (h *harness) setRunning(i int, on bool) {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	patch := fmt.Sprintf(`{"spec":{"running":%t}}`, on)
	if _, err := h.front.Resource(clusterprovider.ClustersResource).Namespace("default").Patch(ctx, h.names[i], "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		h.fatalf("patch Cluster %s running=%t: %v", h.names[i], on, err)
	}
	h.want[i] = map[bool]declared{true: running, false: parked}[on]
}

// --- the tenant side ---

// tenant is a client for cluster i from the kubeconfig the provider delivered.
func (h *harness) tenant(i int) (kubernetes.Interface, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	sec, err := h.frontKube.CoreV1().Secrets("default").Get(ctx, h.names[i]+"-kubeconfig", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["kubeconfig"])
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// write writes n ConfigMaps to every running cluster; only those whose create was
// acknowledged are expected back.
func (h *harness) write(n int) {
	for i, w := range h.want {
		if w != running {
			continue
		}
		c, err := h.tenant(i)
		if err != nil {
			h.fatalf("cluster %s: no tenant client: %v", h.names[i], err)
		}
		for range n {
			h.writes++
			name, value := fmt.Sprintf("w%05d", h.writes), fmt.Sprintf("%s/%d", h.names[i], h.writes)
			ctx, cancel := h.ctx()
			_, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}, metav1.CreateOptions{})
			cancel()
			if err != nil {
				h.fatalf("cluster %s, a settled cluster, refused a write: %v", h.names[i], err)
			}
			h.acked[i][name] = value
		}
	}
}

// --- the checks ---

// groupProcs is every live process of a component, by the DataDir it runs for (its name,
// or "front"), and under "?" those of none of them. A process names its DataDir on argv
// or, like the CCM, in its environment: FindByMarker reads both.
func (h *harness) groupProcs() (map[string][]processrunner.Identity, error) {
	all, err := processrunner.FindByMarker(h.root+"/", h.programs)
	if err != nil {
		return nil, err
	}
	out := map[string][]processrunner.Identity{}
	known := map[int]bool{}
	dirs := map[string]string{clusterprovider.FrontName: filepath.Join(h.root, clusterprovider.FrontName)}
	for _, n := range h.names {
		dirs[n] = clusterprovider.DataDirOf(h.root, n)
	}
	for name, dir := range dirs {
		ids, err := processrunner.FindByMarker(dir+"/", h.programs)
		if err != nil {
			return nil, err
		}
		out[name] = ids
		for _, id := range ids {
			known[id.Pid] = true
		}
	}
	for _, id := range all {
		if !known[id.Pid] {
			out["?"] = append(out["?"], id)
		}
	}
	return out, nil
}

func (h *harness) procsOf(i int, binary string) []processrunner.Identity {
	ids, _ := processrunner.FindByMarker(clusterprovider.DataDirOf(h.root, h.names[i])+"/", []string{binary})
	return ids
}

func (h *harness) leases() ([]portallocator.Lease, error) {
	b, err := os.ReadFile(filepath.Join(h.root, "leases.json"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var book []portallocator.Lease
	if err := json.Unmarshal(b, &book); err != nil {
		return nil, fmt.Errorf("leases.json: %w", err)
	}
	return book, nil
}

// settled checks every cluster against what was declared, and gone (the processes a fault
// ended or orphaned) against the process table. It returns what is not yet so.
func (h *harness) settled(gone []processrunner.Identity) (bool, string) {
	for _, id := range gone {
		if id.Alive() {
			return false, fmt.Sprintf("pid %d (%s) from before the fault still runs", id.Pid, filepath.Base(id.Cmdline[0]))
		}
	}
	procs, err := h.groupProcs()
	if err != nil {
		return false, err.Error()
	}
	if ids := procs["?"]; len(ids) > 0 {
		return false, fmt.Sprintf("process outside every known group: pid %d %v", ids[0].Pid, ids[0].Cmdline)
	}
	leases, err := h.leases()
	if err != nil {
		return false, err.Error()
	}
	byHolder := map[string]int{}
	for _, l := range leases {
		if prev, ok := byHolder[l.Holder]; ok {
			return false, fmt.Sprintf("%s holds two ports, %d and %d", l.Holder, prev, l.Port)
		}
		byHolder[l.Holder] = l.Port
	}
	urls := map[string]string{}
	for i, name := range h.names {
		ok, url, seen := h.clusterSettled(i, procs[name], byHolder)
		if !ok {
			return false, fmt.Sprintf("cluster %s (%s): %s", name, h.want[i], seen)
		}
		if prev, ok := urls[url]; ok && url != "" {
			return false, fmt.Sprintf("port held twice: clusters %s and %s both at %s", prev, name, url)
		}
		urls[url] = name
	}
	return true, ""
}

// clusterSettled checks cluster i against what was declared; a running one's URL is
// returned, which must be at its leased port.
func (h *harness) clusterSettled(i int, procs []processrunner.Identity, byHolder map[string]int) (bool, string, string) {
	name := h.names[i]
	ctx, cancel := h.ctx()
	defer cancel()
	obj, err := h.front.Resource(clusterprovider.ClustersResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	port, leased := byHolder[name+"/kube-apiserver"]
	switch h.want[i] {
	case absent:
		if !apierrors.IsNotFound(err) {
			return false, "", fmt.Sprintf("the Cluster is still there (%v)", err)
		}
		if len(procs) > 0 || leased {
			return false, "", fmt.Sprintf("%d processes, leased %t", len(procs), leased)
		}
		if _, err := h.front.Resource(clusterprovider.NodesResource).Namespace("default").Get(ctx, name+"-n1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, "", fmt.Sprintf("its Node is still there (%v)", err)
		}
		if _, err := os.Stat(clusterprovider.DataDirOf(h.root, name)); !os.IsNotExist(err) {
			return false, "", "its DataDir is still there"
		}
		return true, "", ""
	case parked:
		if err != nil {
			return false, "", err.Error()
		}
		if reason := readyReason(obj); reason != "Parked" || len(procs) > 0 || leased {
			return false, "", fmt.Sprintf("Ready reason %q, %d processes, leased %t", reason, len(procs), leased)
		}
		return true, "", ""
	}
	if err != nil {
		return false, "", err.Error()
	}
	if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase != "Ready" {
		return false, "", "phase " + phase
	}
	count := map[string]int{}
	program := map[int]string{}
	for _, id := range procs {
		program[id.Pid] = id.Cmdline[0]
	}
	for _, id := range procs {
		// A process forked by a matched process of the same program is that process's own
		// child, not a second component: a postmaster's new backend has the postmaster's
		// argv until it sets its title, and a snapshot can catch it in between (it did,
		// after fault 58 of a long run: "2 of postgres").
		if program[parentPid(id.Pid)] == id.Cmdline[0] {
			continue
		}
		count[id.Cmdline[0]]++
	}
	for _, b := range livetest.TenantPrograms(h.bin) {
		if count[b] != 1 {
			return false, "", fmt.Sprintf("%d of %s", count[b], filepath.Base(b))
		}
	}
	if !leased {
		return false, "", "no lease"
	}
	url, _, _ := unstructured.NestedString(obj.Object, "status", "url")
	if !strings.HasSuffix(url, fmt.Sprintf(":%d", port)) {
		return false, "", fmt.Sprintf("URL %s is not at its leased port %d", url, port)
	}
	ok, seen := h.readBack(i)
	return ok, url, seen
}

// readBack reads every acknowledged object of cluster i through its apiserver.
func (h *harness) readBack(i int) (bool, string) {
	c, err := h.tenant(i)
	if err != nil {
		return false, "tenant client: " + err.Error()
	}
	ctx, cancel := h.ctx()
	defer cancel()
	list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "list ConfigMaps: " + err.Error()
	}
	have := map[string]string{}
	for _, cm := range list.Items {
		have[cm.Name] = cm.Data["v"]
	}
	for name, v := range h.acked[i] {
		if have[name] != v {
			return false, fmt.Sprintf("acknowledged ConfigMap %s = %q reads %q", name, v, have[name])
		}
	}
	return true, ""
}

func readyReason(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			r, _ := m["reason"].(string)
			return r
		}
	}
	return ""
}

// converge waits until everything is settled, at most bound; it returns how long it took.
// What is still wrong at the bound is counted (an outlived process, a lost object, a port
// held twice) and fails the test.
func (h *harness) converge(what string, gone []processrunner.Identity) time.Duration {
	h.t.Helper()
	t0 := time.Now()
	deadline := t0.Add(convergeBound)
	for {
		ok, seen := h.settled(gone)
		if ok {
			return time.Since(t0)
		}
		if time.Now().After(deadline) {
			switch {
			case strings.Contains(seen, "still runs"), strings.Contains(seen, "outside every known group"):
				h.outlived++
			case strings.Contains(seen, "acknowledged"):
				h.lostObjects++
			case strings.Contains(seen, "held twice"):
				h.twice++
			}
			h.fatalf("%s: not settled within %s; last seen: %s", what, convergeBound, seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// convergeBound is how long the provider has to bring every cluster back to what was
// declared after one fault. A restart of serve brings every cluster up again, two at once
// (--max-bring-ups 2), each 6 to 10 s here and up to 40 s with both cores busy; the bound
// leaves room for six clusters and a backoff on a loaded machine.
const convergeBound = 5 * time.Minute

// all is every process of the provider's groups now.
func (h *harness) all() []processrunner.Identity {
	ids, _ := processrunner.FindByMarker(h.root+"/", h.programs)
	return ids
}

// clusterProcs is every process of cluster i now.
func (h *harness) clusterProcs(i int) []processrunner.Identity {
	ids, _ := processrunner.FindByMarker(clusterprovider.DataDirOf(h.root, h.names[i])+"/", h.programs)
	return ids
}

// kill9 sends SIGKILL to each process, and to its process group with group.
func kill9(ids []processrunner.Identity, group bool) {
	for _, id := range ids {
		if group {
			syscall.Kill(-id.Pid, syscall.SIGKILL)
		}
		syscall.Kill(id.Pid, syscall.SIGKILL)
	}
}

// parentPid is pid's parent (0 when pid is gone): the fourth field of /proc/<pid>/stat,
// after the command name, which may hold spaces and parentheses.
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
