package clusterprovider

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/materialiser"
)

func TestTheFrontDoorFindsARunningClusterAndWaitsForOneStarting(t *testing.T) {
	l := &Loop{state: map[string]*runState{
		"team-a/web":   {local: "web", group: materialiser.GroupUp, cluster: &Cluster{Name: "web", Port: 31001}},
		"team-b/web":   {local: "web-0a1b2c3d", group: materialiser.GroupAbsent}, // the same name in another account
		"team-a/db":    {local: "db", group: materialiser.GroupStarting},
		"team-a/cache": {local: "cache", group: materialiser.GroupFailed},
	}, changed: make(chan struct{}), clusterIndex: clusterIndexOf(t)}
	ctx := context.Background()
	if addr, err := l.Address(ctx, "web"); err != nil || addr != "127.0.0.1:31001" {
		t.Errorf("Address(web) = %q, %v; want 127.0.0.1:31001", addr, err)
	}
	if _, err := l.Address(ctx, "nope"); !errors.Is(err, frontdoor.ErrUnknownCluster) {
		t.Errorf("Address(nope) = %v, want ErrUnknownCluster", err)
	}
	if _, err := l.Address(ctx, "web-0a1b2c3d"); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Address(web-0a1b2c3d), team-b's web, parked: %v, want not running", err)
	}
	if _, err := l.Address(ctx, "cache"); err == nil || errors.Is(err, frontdoor.ErrUnknownCluster) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Address(cache), a failed bring-up: %v, want not running", err)
	}

	got := make(chan string, 1)
	go func() {
		addr, err := l.Address(ctx, "db")
		if err != nil {
			addr = err.Error()
		}
		got <- addr
	}()
	select {
	case a := <-got:
		t.Fatalf("Address(db) answered %q while db was starting", a)
	case <-time.After(50 * time.Millisecond): // not a synchronisation: a check that it waits
	}
	l.mu.Lock()
	st := l.state["team-a/db"]
	st.group, st.cluster = materialiser.GroupUp, &Cluster{Name: "db", Port: 31002}
	l.signalLocked()
	l.mu.Unlock()
	if a := <-got; a != "127.0.0.1:31002" {
		t.Errorf("Address(db) once up = %q", a)
	}

	l.state["team-a/db"].group = materialiser.GroupStarting
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := l.Address(short, "db"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still starting") {
		t.Errorf("Address(db) past its deadline = %v", err)
	}
}

// clusterIndexOf is the informer's Cluster index holding the Clusters named.
func clusterIndexOf(t *testing.T, names ...string) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byLocal: indexByLocal})
	for _, n := range names {
		u := &unstructured.Unstructured{}
		u.SetNamespace("default")
		u.SetName(n)
		if err := idx.Add(u); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// A connection that comes before the informers synced, or for a Cluster declared but not
// yet looked at by a pass (a provider just restarted), is held for that pass: refused, a
// client that connects first thing after the restart would be told no such cluster is.
func TestTheFrontDoorHoldsAConnectionUntilTheClusterIsKnown(t *testing.T) {
	l := &Loop{state: map[string]*runState{}, changed: make(chan struct{})}
	ask := func(name string) <-chan error {
		got := make(chan error, 1)
		go func() {
			_, err := l.Address(context.Background(), name)
			got <- err
		}()
		return got
	}
	before := ask("nope")
	select {
	case err := <-before:
		t.Fatalf("Address before the informers synced answered %v", err)
	case <-time.After(50 * time.Millisecond): // not a synchronisation: a check that it waits
	}
	l.mu.Lock()
	l.clusterIndex = clusterIndexOf(t, "s")
	l.signalLocked()
	l.mu.Unlock()
	if err := <-before; !errors.Is(err, frontdoor.ErrUnknownCluster) {
		t.Errorf("Address(nope) once synced = %v, want ErrUnknownCluster", err)
	}

	s := ask("s")
	select {
	case err := <-s:
		t.Fatalf("Address(s), declared but not yet passed, answered %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	l.mu.Lock()
	l.state["default/s"] = &runState{local: "s", group: materialiser.GroupUp, cluster: &Cluster{Name: "s", Port: 31003}}
	l.signalLocked()
	l.mu.Unlock()
	if err := <-s; err != nil {
		t.Errorf("Address(s) after its first pass: %v", err)
	}
}

// fakeActivity records what the loop asks the front door to forget.
type fakeActivity struct{ forgot []string }

func (f *fakeActivity) Activity(string) (time.Time, int) { return time.Time{}, 0 }
func (f *fakeActivity) Forget(cluster string)            { f.forgot = append(f.forgot, cluster) }

// A Cluster that is gone is forgotten, so that the front door answers its name as no
// cluster's; but not while a process of it may run; another account's Cluster of the same
// name, its own local name, is untouched.
func TestAClusterGoneIsForgottenOnceNothingOfItRuns(t *testing.T) {
	act := &fakeActivity{}
	l := &Loop{Activity: act, state: map[string]*runState{
		"team-a/web": {local: "web-0a1b2c3d", group: materialiser.GroupAbsent},
		"team-b/web": {local: "web", group: materialiser.GroupUp, cluster: &Cluster{Name: "web", Port: 31001}},
		"team-a/db":  {local: "db", group: materialiser.GroupAbsent},
		"team-a/run": {local: "run", group: materialiser.GroupUp}, // its finalizer removed by hand while it ran
	}, changed: make(chan struct{}), clusterIndex: clusterIndexOf(t)}
	l.forget("team-a/db")
	if _, err := l.Address(context.Background(), "db"); !errors.Is(err, frontdoor.ErrUnknownCluster) {
		t.Errorf("Address(db) once gone = %v, want ErrUnknownCluster", err)
	}
	l.forget("team-a/web")
	l.forget("team-a/run")
	if _, ok := l.state["team-a/run"]; !ok {
		t.Error("the state of a Cluster whose group runs was dropped: the stop would not find the group")
	}
	if addr, err := l.Address(context.Background(), "web"); err != nil || addr != "127.0.0.1:31001" {
		t.Errorf("Address(web), team-b's: %q, %v", addr, err)
	}
	if want := []string{"db", "web-0a1b2c3d"}; !slices.Equal(act.forgot, want) {
		t.Errorf("front door told to forget %v, want %v", act.forgot, want)
	}
}

func TestTheFrontDoorURL(t *testing.T) {
	off := FrontDoor{}
	if u := off.URL("web"); u != "" {
		t.Errorf("off: %q", u)
	}
	on := FrontDoor{Names: frontdoor.Names{BaseDomain: "kcp.example"}, Port: 6443}
	if u := on.URL("web"); u != "https://web.kcp.example:6443" {
		t.Errorf("on: %q", u)
	}
}

// Turning the front door on for a cluster minted without it: its serving certificate is
// minted again with the new name, by the same CA, and only the tenant's kubeconfig names
// the front door; the provider's own clients keep going straight to the apiserver.
func TestTurningTheFrontDoorOnReissuesTheServingCertificate(t *testing.T) {
	s := clusterstackSpec(t)
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(s.Layout().CACert())
	if err := EnsureCredentials(s, []string{"demo.kcp.example"}, "https://demo.kcp.example:6443", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(s.Layout().CACert())
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("turning the front door on re-minted the CA")
	}
	cert, err := x509Cert(s.Layout().APIServerCert())
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("demo.kcp.example"); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("serving certificate lost loopback: %v", err)
	}
	for path, want := range map[string]string{s.Layout().TenantKubeconfig(): "https://demo.kcp.example:6443", s.Layout().AdminKubeconfig(): s.URL()} {
		b, _ := os.ReadFile(path)
		if got := kubeconfigServer(b); got != want {
			t.Errorf("%s names %q, want %q", filepath.Base(path), got, want)
		}
	}
	// Nothing changes on a second pass with the same names.
	before, _ := os.ReadFile(s.Layout().APIServerCert())
	if err := EnsureCredentials(s, []string{"demo.kcp.example"}, "https://demo.kcp.example:6443", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(s.Layout().APIServerCert()); !bytes.Equal(before, after) {
		t.Error("a second pass with the same names re-minted the serving certificate")
	}
}

func clusterstackSpec(t *testing.T) clusterstack.Spec {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), APIServerPort: 30001}
	if err := os.MkdirAll(s.Layout().PKIDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return s
}

// A connection for a sleeping cluster asks it to wake, once, and is held until it is up.
func TestAConnectionWakesASleepingCluster(t *testing.T) {
	l := &Loop{state: map[string]*runState{
		"team-a/web": {local: "web", group: materialiser.GroupAbsent, phase: materialiser.PhaseSleeping},
	}, changed: make(chan struct{})}
	got := make(chan string, 2)
	for range 2 {
		go func() {
			addr, err := l.Address(context.Background(), "web")
			if err != nil {
				addr = err.Error()
			}
			got <- addr
		}()
	}
	st := l.state["team-a/web"]
	waitUntil(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return !st.wakeSince.IsZero() })
	l.mu.Lock()
	first := st.wakeSince
	l.mu.Unlock()
	o := materialiser.Observed{Now: time.Now(), Running: true, HasFinalizer: true, Phase: materialiser.PhaseSleeping, Group: materialiser.GroupAbsent,
		SleepAfter: time.Minute, WakeRequested: true}
	if r := materialiser.Reconcile(o); r.Ready.Reason != "Waking" {
		t.Fatalf("a held request for a sleeping cluster: %+v, want Waking", r)
	}
	l.mu.Lock()
	st.group = materialiser.GroupStarting
	l.signalLocked()
	l.mu.Unlock()
	l.mu.Lock()
	if st.wakeSince != first {
		t.Errorf("a second connection restarted the wake's clock")
	}
	st.group, st.cluster, st.phase = materialiser.GroupUp, &Cluster{Name: "web", Port: 31003}, materialiser.PhaseReady
	l.signalLocked()
	l.mu.Unlock()
	for range 2 {
		if a := <-got; a != "127.0.0.1:31003" {
			t.Errorf("a held connection got %q", a)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
