package procgroup

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/processrunner"
)

// spawnForAdoption spawns two sleepers with log files, as the provider does, and lets go
// of them as a provider that stops with --on-exit keep does.
func spawnForAdoption(t *testing.T) (Options, []Step, []Member) {
	t.Helper()
	dir := t.TempDir()
	o := Options{RecordDir: filepath.Join(dir, "run"), Grace: time.Second, Marker: dir + "/", Programs: []string{"/bin/sleep"}, Inputs: "v1"}
	os.MkdirAll(o.RecordDir, 0o700)
	steps := []Step{sleeper(ComponentPostgres), sleeper(ComponentKine)}
	for i := range steps {
		steps[i].Spec.Dir = dir
		steps[i].Spec.LogFile = filepath.Join(dir, steps[i].Name.String()+".log")
		// The marker in the environment, as the DataDir is in a component's: what the
		// backstop finds a member by when its record no longer names it.
		steps[i].Spec.Env = []string{"DATADIR=" + o.Marker}
	}
	g, err := Spawn(context.Background(), o, steps)
	if err != nil {
		t.Fatal(err)
	}
	members := g.Members()
	g.Release()
	t.Cleanup(func() {
		for _, m := range members {
			m.Identity.Kill(0, time.Second)
		}
	})
	return o, steps, members
}

func TestAGroupLeftRunningIsAdoptedWithoutARestart(t *testing.T) {
	o, steps, before := spawnForAdoption(t)
	for _, m := range before {
		if !m.Identity.Alive() {
			t.Fatalf("%s: released, yet it stopped", m.Step)
		}
	}
	g, a, err := Adopt(context.Background(), o, steps)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Stale) != 0 {
		t.Fatalf("stale %v, want current", a.Stale)
	}
	if !slices.EqualFunc(g.Members(), before, func(x, y Member) bool {
		return x.Step == y.Step && x.Identity.Pid == y.Identity.Pid && x.Identity.StartTime == y.Identity.StartTime
	}) {
		t.Fatalf("adopted %v, want the very processes %v", g.Members(), before)
	}
	// Supervised as a spawned group: a member that dies is reported.
	syscall.Kill(before[1].Identity.Pid, syscall.SIGKILL)
	select {
	case ex := <-g.Exited():
		if ex.Step != ComponentKine {
			t.Fatalf("exit of %s, want kine", ex.Step)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an adopted member's death was not reported")
	}
	if err := g.Reap(); err != nil {
		t.Fatal(err)
	}
	if before[0].Identity.Alive() {
		t.Fatal("Reap left the adopted postgres running")
	}
	if ents, _ := os.ReadDir(o.RecordDir); len(ents) != 0 {
		t.Fatalf("records left: %v", ents)
	}
}

func TestAStaleGroupIsAdoptedAndSaysWhy(t *testing.T) {
	o, steps, _ := spawnForAdoption(t)
	o.Inputs = "v2"
	steps[1].Spec.Env = append(steps[1].Spec.Env, "X=1")
	_, a, err := Adopt(context.Background(), o, steps)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(a.Stale, "; ")
	for _, want := range []string{"postgres: its credentials or configuration changed", "kine: started with another argv or environment"} {
		if !strings.Contains(got, want) {
			t.Errorf("stale %q, want it to say %q", got, want)
		}
	}
}

// An impostor: a record names a process that is not the one recorded (another start time,
// or another argv), or one that runs as recorded but was not started by the group's spawn.
// It is never adopted, and what Spawn then does reaps the group's own members.
func TestAnImpostorIsNeverAdopted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forge  func(rec *record, impostor processrunner.Identity)
		reason string
	}{
		{"another start time", func(rec *record, imp processrunner.Identity) { rec.Pid = imp.Pid }, "does not run as recorded"},
		{"another argv", func(rec *record, imp processrunner.Identity) {
			rec.Pid, rec.StartTime = imp.Pid, imp.StartTime
		}, "does not run as recorded"},
		{"not of the spawn", func(rec *record, imp processrunner.Identity) {
			rec.Identity = imp
		}, "does not carry the record's generation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, steps, before := spawnForAdoption(t)
			cmd := exec.Command("/bin/sleep", "301")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			imp, err := processrunner.IdentityOf(cmd.Process.Pid)
			for err == nil && len(imp.Cmdline) == 0 {
				imp, err = processrunner.IdentityOf(cmd.Process.Pid)
			}
			if err != nil {
				t.Fatal(err)
			}
			path := recordPath(o.RecordDir, ComponentKine)
			var rec record
			b, _ := os.ReadFile(path)
			json.Unmarshal(b, &rec)
			tc.forge(&rec, imp)
			b, _ = json.Marshal(rec)
			os.WriteFile(path, b, 0o600)

			_, _, err = Adopt(context.Background(), o, steps)
			if !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Adopt: %v, want ErrNotAdoptable saying %q", err, tc.reason)
			}
			// The caller spawns again: the group's own postgres is reaped, the impostor's
			// pid is left alone unless the record still names it as it runs.
			g, err := Spawn(context.Background(), o, steps)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Reap()
			for _, m := range before {
				if m.Identity.Alive() {
					t.Fatalf("the group's own %s survived the spawn that follows a refused adoption", m.Step)
				}
			}
			if tc.name != "not of the spawn" && !imp.Alive() {
				t.Fatal("a process that is not the recorded one was killed")
			}
		})
	}
}

func TestAMemberWhoseGateFailsIsNotAdopted(t *testing.T) {
	o, steps, before := spawnForAdoption(t)
	steps[1].Live = func(context.Context) error { return errors.New("no answer") }
	_, _, err := Adopt(context.Background(), o, steps)
	if !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("Adopt: %v, want ErrNotAdoptable with the gate's error", err)
	}
	for _, m := range before {
		if !m.Identity.Alive() {
			t.Fatalf("%s: a refused adoption touched it; the caller's Spawn reaps", m.Step)
		}
	}
	if _, _, err := Adopt(context.Background(), o, steps[:1]); !errors.Is(err, ErrNotAdoptable) {
		t.Fatalf("adopting a group with a record no step names: %v, want ErrNotAdoptable", err)
	}
	// A member recorded before its gate passed (a bring-up cut short) is not ready.
	path := recordPath(o.RecordDir, ComponentKine)
	var rec record
	b, _ := os.ReadFile(path)
	json.Unmarshal(b, &rec)
	rec.Ready = false
	b, _ = json.Marshal(rec)
	os.WriteFile(path, b, 0o600)
	steps[1].Live = nil
	if _, _, err := Adopt(context.Background(), o, steps); !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), "gate never passed") {
		t.Fatalf("adopting a member whose gate never passed: %v, want ErrNotAdoptable", err)
	}
}
