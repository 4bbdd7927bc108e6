package faults

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

var (
	rounds   = flag.Int("rounds", 30, "faults to inject (a long run: -rounds 200 -clusters 6)")
	seedFlag = flag.Uint64("seed", 0, "the schedule's seed; 0 picks one from the clock (the test prints it)")
	clusters = flag.Int("clusters", 4, "clusters the faults hit")
	budget   = flag.Duration("for", 0, "stop injecting once this much time has passed (0: no limit), then end as usual: delete all, stop, nothing left; a long run that must fit a window")
	ports    = flag.String("port-range", "31800-31899", "the apiservers' ports (another range lets a long run go on beside the suite)")
)

// A seeded schedule of faults against a provider with clusters that hold data: after each
// fault every cluster is back to what was declared within convergeBound, no process runs
// outside a known group, none twice, no port is held twice, every acknowledged write reads
// back; at the end, delete all and stop leaves nothing. Replay a failure with the seed it
// prints.
func TestFaults(t *testing.T) {
	livetest.Start(t)
	bin := livetest.BinDir(t)
	for _, b := range []string{"kine", "kube-control-plane", "kube-apiserver", "kube-controller-manager", "socialweb-cloud-controller-manager", "kwok"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			livetest.Need(t, bin+"/"+b+" is not installed; run deploy/install-components.sh")
		}
	}
	if _, err := os.Stat(postgresBinary); err != nil {
		livetest.Need(t, postgresBinary+" is not installed; run deploy/install-components.sh")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d; replay: go test ./internal/faults -run TestFaults -v -seed %d -rounds %d -clusters %d", seed, seed, *rounds, *clusters)
	exe := livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-clusterprovider")
	h := newHarness(t, exe, bin, livetest.DataRoot(t), *ports, *clusters)
	h.startServe()
	for i := range h.names {
		h.create(i)
	}
	h.converge("the first bring-up", nil)
	h.write(5)

	var took []time.Duration
	byKind := map[Kind]int{}
	// The summary is printed however the test ends, so that a failed run says what it found.
	t.Cleanup(func() { summarize(t, seed, h, took, byKind) })
	start := time.Now()
	for n, f := range Schedule(seed, *rounds, *clusters) {
		if *budget > 0 && time.Since(start) > *budget {
			t.Logf("stopping after %d of %d faults: -for %s is spent", n, *rounds, *budget)
			break
		}
		t0 := time.Now()
		gone := h.inject(f)
		d := h.converge(fmt.Sprintf("fault %d (%s)", n+1, f), gone)
		if f.Kind == RenewCertificates || f.Kind == KillServeDuringRenewal {
			if certrenewal.Requested(h.renewRequest(f.Cluster)) {
				h.fatalf("fault %d (%s): settled with the renewal still requested", n+1, f)
			}
		}
		took = append(took, time.Since(t0))
		byKind[f.Kind]++
		t.Logf("fault %3d %-60s settled %6.1fs after the fault", n+1, f, d.Seconds())
		h.write(2)
		if ok, seen := h.settled(nil); !ok {
			h.fatalf("after the writes of fault %d: %s", n+1, seen)
		}
	}

	// The end: delete all, stop; nothing may be left.
	for i := range h.names {
		h.delete(i)
	}
	h.converge("deleting every cluster", nil)
	h.serve.cmd.Process.Signal(syscall.SIGINT)
	h.waitLine("stopped; nothing is running", 3*time.Minute)
	if st := h.waitExit(time.Minute); !st.Success() {
		h.fatalf("serve after Ctrl-C: %v", st)
	}
	h.nothingLeft("at the end")
	if dirs, _ := os.ReadDir(filepath.Join(h.root, "clusters")); len(dirs) > 0 {
		t.Errorf("DataDirs left: %v", dirs)
	}
}

// summarize prints the run's figures: faults by kind, the worst and p95 time from a fault
// to everything settled, and what the checks found wrong.
func summarize(t *testing.T, seed uint64, h *harness, took []time.Duration, byKind map[Kind]int) {
	kinds := make([]string, 0, len(byKind))
	for k, c := range byKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
	}
	sort.Strings(kinds)
	t.Logf("faults by kind: %s", strings.Join(kinds, ", "))
	took = slices.Sorted(slices.Values(took))
	worst, p95 := time.Duration(0), time.Duration(0)
	if len(took) > 0 {
		worst, p95 = took[len(took)-1], took[(len(took)*95+99)/100-1]
	}
	summary := fmt.Sprintf("faults: %d over %d clusters (seed %d, %d serve runs, %d acknowledged writes); worst convergence %.1fs, p95 %.1fs; processes outlived %d; objects lost %d; ports held twice %d",
		len(took), len(h.names), seed, h.serveRuns, h.writes, worst.Seconds(), p95.Seconds(), h.outlived, h.lostObjects, h.twice)
	t.Log(summary)
	fmt.Println(summary) // shown without -v too: CI's log carries the figures
}

// nothingLeft asserts that no process of the provider's groups runs and no port is leased.
func (h *harness) nothingLeft(when string) {
	h.t.Helper()
	if left := h.all(); len(left) > 0 {
		h.outlived += len(left)
		h.fatalf("%s: %d processes left, first pid %d %v", when, len(left), left[0].Pid, left[0].Cmdline)
	}
	if ls, err := h.leases(); err != nil || len(ls) > 0 {
		h.fatalf("%s: leases left: %v %v", when, ls, err)
	}
}

// inject strikes with f and returns the processes it ended or orphaned: the check waits
// for them to be gone (reaped, not adopted) before it calls the provider settled.
func (h *harness) inject(f Fault) []processrunner.Identity {
	h.t.Helper()
	i := f.Cluster
	component := map[Kind]string{
		KillPostgres: postgresBinary, KillKine: "kine", KillControlPlane: "kube-control-plane",
		KillCCM: "socialweb-cloud-controller-manager", KillKwok: "kwok",
	}
	switch f.Kind {
	case KillPostgres, KillKine, KillControlPlane, KillCCM, KillKwok:
		b := component[f.Kind]
		if !filepath.IsAbs(b) {
			b = filepath.Join(h.bin, b)
		}
		victim := h.procsOf(i, b)
		if len(victim) != 1 {
			h.fatalf("%s: %d of %s running, want 1", f, len(victim), b)
		}
		gone := h.clusterProcs(i)
		kill9(victim, false)
		if f.Kind == KillKwok {
			return victim // its node group's; whether the control plane restarts too is the provider's call
		}
		return gone // a member died: the whole group is reaped and brought back

	case StalePostgres:
		victim := h.procsOf(i, postgresBinary)
		if len(victim) != 1 {
			h.fatalf("%s: %d postgres running, want 1", f, len(victim))
		}
		gone := h.clusterProcs(i)
		kill9(victim, true) // the postmaster and every backend: nothing removes its pid file
		if !anyFile(h.dataDir(i), "postmaster.pid") {
			h.t.Logf("%s: no postmaster.pid left to be stale (the layout moved?)", f)
		}
		return gone

	case PortTaken:
		victim := h.procsOf(i, filepath.Join(h.bin, "kube-control-plane"))
		port := h.leasedPort(i)
		if len(victim) != 1 || port == 0 {
			h.fatalf("%s: %d apiservers, leased port %d", f, len(victim), port)
		}
		gone := h.clusterProcs(i)
		kill9(victim, false)
		l := listenSoon(port)
		if l == nil {
			h.t.Logf("%s: could not take port %d in time; the fault is a plain kill", f, port)
			return gone
		}
		// The fault lasts portHold: the provider meets the taken port when it brings the
		// group back (the stop gave the lease back; the next Acquire skips a port it
		// cannot bind, so the cluster comes back on another); then it is given back.
		time.Sleep(portHold)
		l.Close()
		return gone

	case KillServe:
		// Nothing goes and nothing restarts: the next serve adopts every group (the one
		// before it had settled), the very processes (invariant 12).
		before := h.all()
		h.killServe()
		h.startServe()
		h.converge(fmt.Sprintf("%s: adopted", f), nil)
		if missing := notAmong(before, h.all()); len(missing) > 0 {
			h.fatalf("%s: %d processes were not adopted, first pid %d %v", f, len(missing), missing[0].Pid, missing[0].Cmdline)
		}
		return nil

	case KillServeDuringBringUp, InterruptDuringBringUp, TerminateDuringBringUp:
		h.parkAndWait(i, fmt.Sprintf("%s: parking first", f))
		h.setRunning(i, true)
		time.Sleep(f.Delay) // the fault's moment within the bring-up, not a synchronisation
		gone := h.all()
		switch f.Kind {
		case KillServeDuringBringUp:
			// The bring-up cut short is reaped or, had it passed every gate, adopted; the
			// other clusters are adopted: nothing is bound to go.
			gone = nil
			h.killServe()
		default:
			sig := map[Kind]syscall.Signal{InterruptDuringBringUp: syscall.SIGINT, TerminateDuringBringUp: syscall.SIGTERM}[f.Kind]
			h.serve.cmd.Process.Signal(sig)
			h.waitLine("nothing is running", 3*time.Minute)
			if st := h.waitExit(time.Minute); !st.Success() {
				h.fatalf("%s: serve exited %v", f, st)
			}
			h.nothingLeft(f.String()) // invariant 26: said only once it is so
		}
		h.startServe()
		return gone

	case KillServeDuringTeardown:
		gone := h.clusterProcs(i) // the others are adopted
		h.delete(i)
		time.Sleep(f.Delay / 4) // a teardown takes 1 to 2 s here
		h.killServe()
		h.startServe()
		h.converge(fmt.Sprintf("%s: the deletion finishing", f), gone)
		h.create(i)
		return gone

	case PowerCut:
		h.write(10)
		gone := h.all()
		h.killServe()
		kill9(h.all(), true)
		h.startServe()
		return gone

	case RenewCertificates, KillServeDuringRenewal:
		// Every process of the cluster is replaced by the renewal's restart.
		gone := h.clusterProcs(i)
		if err := certrenewal.Request(h.renewRequest(i), "the fault test"); err != nil {
			h.fatalf("%s: %v", f, err)
		}
		if f.Kind == KillServeDuringRenewal {
			// The provider takes the request within 10 s (certrenewal.Policy.CheckEvery):
			// the kill lands before, during or after the restart.
			time.Sleep(f.Delay) // the fault's moment, not a synchronisation
			h.killServe()
			h.startServe()
		}
		return gone

	case ParkUnpark:
		h.parkAndWait(i, fmt.Sprintf("%s: parked", f))
		h.setRunning(i, true)
		return nil

	case DeleteRecreate:
		h.deleteAndWait(i, fmt.Sprintf("%s: deleted", f))
		h.create(i)
		return nil

	case DeleteDuringBring:
		h.deleteAndWait(i, fmt.Sprintf("%s: deleted", f))
		h.create(i)
		time.Sleep(f.Delay) // the deletion's moment within the bring-up
		h.deleteAndWait(i, fmt.Sprintf("%s: deleted during its bring-up", f))
		h.create(i)
		return nil
	}
	h.fatalf("unknown fault %s", f.Kind)
	return nil
}

// portHold is how long a taken port stays taken: long enough for a bring-up to meet it.
const portHold = 10 * time.Second

// deleteAndWait deletes cluster i and waits until nothing of it is left.
func (h *harness) deleteAndWait(i int, what string) {
	h.t.Helper()
	gone := h.clusterProcs(i)
	h.delete(i)
	h.converge(what, gone)
}

// parkAndWait parks cluster i and waits until its processes are gone.
func (h *harness) parkAndWait(i int, what string) {
	h.t.Helper()
	gone := h.clusterProcs(i)
	h.setRunning(i, false)
	h.converge(what, gone)
}

func (h *harness) killServe() {
	h.serve.cmd.Process.Signal(syscall.SIGKILL)
	h.waitExit(time.Minute)
}

func (h *harness) dataDir(i int) string {
	return filepath.Join(h.root, "clusters", h.names[i])
}

func (h *harness) renewRequest(i int) string {
	return clusterstack.Layout{Root: h.dataDir(i)}.RenewRequest()
}

func (h *harness) leasedPort(i int) int {
	ls, _ := h.leases()
	for _, l := range ls {
		if l.Holder == h.names[i]+"/kube-apiserver" {
			return l.Port
		}
	}
	return 0
}

// listenSoon takes port on loopback as soon as the killed apiserver has let it go.
func listenSoon(port int) net.Listener {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l
		}
	}
	return nil
}

// anyFile reports whether a file named name is somewhere under dir.
func anyFile(dir, name string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			found = true
		}
		return nil
	})
	return found
}

// notAmong is what of before is not in after, the same process (pid and start time).
func notAmong(before, after []processrunner.Identity) []processrunner.Identity {
	var out []processrunner.Identity
	for _, b := range before {
		if !slices.ContainsFunc(after, func(a processrunner.Identity) bool { return a.Pid == b.Pid && a.StartTime == b.StartTime }) {
			out = append(out, b)
		}
	}
	return out
}
