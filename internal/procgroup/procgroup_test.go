package procgroup

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/processrunner"
)

// recorder collects events in order.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) on(e Event) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }

func (r *recorder) phase(p string) []Component {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Component
	for _, e := range r.events {
		if e.Phase == p {
			out = append(out, e.Step)
		}
	}
	return out
}

func ready(context.Context) error { return nil }

func sleeper(c Component) Step {
	return Step{Name: c, Spec: processrunner.Spec{Argv: []string{"/bin/sleep", "300"}}, Ready: ready}
}

func opts(t *testing.T, r *recorder) Options {
	return Options{RecordDir: t.TempDir(), Grace: time.Second, OnEvent: r.on}
}

func TestStepsSpawnInOrderAndReapInReverse(t *testing.T) {
	r := &recorder{}
	steps := []Step{sleeper(ComponentPostgres), sleeper(ComponentKine), sleeper(ComponentAPIServer), sleeper(ComponentControllerManager), sleeper(ComponentScheduler)}
	o := opts(t, r)
	g, err := Spawn(context.Background(), o, steps)
	if err != nil {
		t.Fatal(err)
	}
	members := g.Members()
	if err := g.Reap(); err != nil {
		t.Fatal(err)
	}
	want := []Component{ComponentPostgres, ComponentKine, ComponentAPIServer, ComponentControllerManager, ComponentScheduler}
	if got := r.phase("ready"); !slices.Equal(got, want) {
		t.Fatalf("ready order %v, want %v", got, want)
	}
	slices.Reverse(want)
	if got := r.phase("stopping"); !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
	for _, m := range members {
		if m.Identity.Alive() {
			t.Fatalf("%s alive after Reap", m.Step)
		}
	}
	if ents, _ := os.ReadDir(o.RecordDir); len(ents) != 0 {
		t.Fatalf("records left after Reap: %v", ents)
	}
	if err := g.Reap(); err != nil {
		t.Fatalf("second Reap: %v", err)
	}
}

func TestAStepWithoutAGateStartsNothing(t *testing.T) {
	r := &recorder{}
	prepared := false
	first := sleeper(ComponentPostgres)
	first.Prepare = func(context.Context) error { prepared = true; return nil }
	noGate := sleeper(ComponentKine)
	noGate.Ready = nil
	_, err := Spawn(context.Background(), opts(t, r), []Step{first, noGate})
	if !errors.Is(err, ErrNoGate) || !strings.Contains(err.Error(), "kine") {
		t.Fatalf("Spawn = %v, want ErrNoGate naming kine", err)
	}
	if prepared || len(r.phase("starting")) != 0 {
		t.Fatal("something started although a step had no gate")
	}
}

func TestAFailingGateReapsWhatStartedInReverse(t *testing.T) {
	r := &recorder{}
	bad := sleeper(ComponentAPIServer)
	bad.Spec.Argv = []string{"/bin/sh", "-c", "echo listening on nothing; exec /bin/sleep 300"}
	bad.ReadyTimeout = 500 * time.Millisecond
	bad.Ready = func(ctx context.Context) error { <-ctx.Done(); return errors.New("not ready") }
	_, err := Spawn(context.Background(), opts(t, r), []Step{sleeper(ComponentPostgres), sleeper(ComponentKine), bad, sleeper(ComponentScheduler)})
	var se *StepError
	if !errors.As(err, &se) || se.Step != ComponentAPIServer {
		t.Fatalf("Spawn = %v, want a StepError for kube-apiserver", err)
	}
	if !strings.Contains(err.Error(), "listening on nothing") {
		t.Fatalf("error %q lacks the step's output tail", err)
	}
	want := []Component{ComponentAPIServer, ComponentKine, ComponentPostgres}
	if got := r.phase("stopping"); !slices.Equal(got, want) {
		t.Fatalf("reap order %v, want %v", got, want)
	}
	if slices.Contains(r.phase("starting"), ComponentScheduler) {
		t.Fatal("a step after the failed one started")
	}
}

func TestAGateTimesOut(t *testing.T) {
	s := sleeper(ComponentKine)
	s.ReadyTimeout = 100 * time.Millisecond
	s.Ready = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	t0 := time.Now()
	_, err := Spawn(context.Background(), opts(t, &recorder{}), []Step{s})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Spawn = %v, want the gate's deadline", err)
	}
	if time.Since(t0) > 10*time.Second {
		t.Fatal("the gate's deadline was not honoured")
	}
}

func TestAnEarlyExitFailsTheBringUp(t *testing.T) {
	dies := Step{Name: ComponentPostgres, Spec: processrunner.Spec{Argv: []string{"/bin/sh", "-c", "echo boom; exit 3"}},
		Ready: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	_, err := Spawn(context.Background(), opts(t, &recorder{}), []Step{dies})
	if !errors.Is(err, ErrEarlyExit) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Spawn = %v, want ErrEarlyExit with the output tail", err)
	}
}

func TestExitedReportsAMemberThatDies(t *testing.T) {
	g, err := Spawn(context.Background(), opts(t, &recorder{}), []Step{sleeper(ComponentPostgres), sleeper(ComponentKine)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Reap()
	kine := g.Members()[1]
	if err := kine.Identity.Kill(0, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-g.Exited():
		if ex.Step != ComponentKine {
			t.Fatalf("Exited names %s, want kine", ex.Step)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a dead member was not reported")
	}
}

func TestStepsOutOfOrderAreRefused(t *testing.T) {
	_, err := Spawn(context.Background(), opts(t, &recorder{}), []Step{sleeper(ComponentAPIServer), sleeper(ComponentKine)})
	if !errors.Is(err, ErrStepOrder) {
		t.Fatalf("Spawn = %v, want ErrStepOrder", err)
	}
}

func TestTheCCMIsReapedBeforeTheControlPlane(t *testing.T) {
	r := &recorder{}
	steps := []Step{sleeper(ComponentPostgres), sleeper(ComponentKine), sleeper(ComponentAPIServer), sleeper(ComponentControllerManager), sleeper(ComponentScheduler), sleeper(ComponentCloudControllerManager)}
	g, err := Spawn(context.Background(), opts(t, r), steps)
	if err != nil {
		t.Fatal(err)
	}
	g.Reap()
	// A CCM that outlived its apiserver would loop on connection errors through every teardown.
	want := []Component{ComponentCloudControllerManager, ComponentScheduler, ComponentControllerManager, ComponentAPIServer, ComponentKine, ComponentPostgres}
	if stops := r.phase("stopping"); !slices.Equal(stops, want) {
		t.Fatalf("stop order %v, want %v", stops, want)
	}
}

func TestSurvivorsOfAnEarlierRunAreReapedNotAdopted(t *testing.T) {
	o := opts(t, &recorder{})
	first, err := Spawn(context.Background(), o, []Step{sleeper(ComponentPostgres), sleeper(ComponentKine)})
	if err != nil {
		t.Fatal(err)
	}
	old := first.Members()
	// A second run on the same records, as after a provider crash: it reaps, then starts anew.
	second, err := Spawn(context.Background(), o, []Step{sleeper(ComponentPostgres), sleeper(ComponentKine)})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Reap()
	for _, m := range old {
		if m.Identity.Alive() {
			t.Fatalf("survivor %s (pid %d) was not reaped", m.Step, m.Identity.Pid)
		}
	}
	for i, m := range second.Members() {
		if m.Identity.Pid == old[i].Identity.Pid {
			t.Fatalf("%s adopted the old process", m.Step)
		}
	}
}

// The one-process control plane's number comes after the node group's members (numbers,
// which name records, are never reused), but it starts where the three did: after kine,
// before the CCM; survivors are reaped in the reverse of that, and Recorded names it.
func TestTheOneProcessControlPlaneStartsWhereTheThreeDid(t *testing.T) {
	if err := Validate([]Step{sleeper(ComponentPostgres), sleeper(ComponentKine), sleeper(ComponentControlPlane), sleeper(ComponentCloudControllerManager)}); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	for _, bad := range [][]Step{
		{sleeper(ComponentControlPlane), sleeper(ComponentKine)},
		{sleeper(ComponentCloudControllerManager), sleeper(ComponentControlPlane)},
	} {
		if err := Validate(bad); !errors.Is(err, ErrStepOrder) {
			t.Errorf("Validate(%s, %s) = %v, want ErrStepOrder", bad[0].Name, bad[1].Name, err)
		}
	}
	files := []string{"09-kwok.json", "08-cloud-controller-manager.json", "11-kube-control-plane.json", "01-postgres.json", "03-kine.json", "05-kube-apiserver.json"}
	sortByStartOrder(files)
	want := []string{"01-postgres.json", "03-kine.json", "11-kube-control-plane.json", "05-kube-apiserver.json", "08-cloud-controller-manager.json", "09-kwok.json"}
	if !slices.Equal(files, want) {
		t.Fatalf("start order of records %v, want %v", files, want)
	}

	o := opts(t, &recorder{})
	g, err := Spawn(context.Background(), o, []Step{sleeper(ComponentPostgres), sleeper(ComponentKine), sleeper(ComponentControlPlane), sleeper(ComponentCloudControllerManager)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Reap()
	got, err := Recorded(o.RecordDir)
	if want := []Component{ComponentPostgres, ComponentKine, ComponentControlPlane, ComponentCloudControllerManager}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Recorded = %v, %v; want %v", got, err, want)
	}
}
