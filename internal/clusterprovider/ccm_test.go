package clusterprovider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/procgroup"
)

func TestTheCCMIsTheLastStepAndCarriesItsEnvironment(t *testing.T) {
	for _, k3s := range []string{"", "/usr/local/bin/k3s"} {
		s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), BinDir: "/opt/bin", APIServerPort: 30001, K3sBinary: k3s, MaxNodes: 3}
		steps, err := StepsFor(StepInput{Spec: s, Identity: Identity{Cluster: "demo", UID: "u"}})
		if err != nil {
			t.Fatal(err)
		}
		last := steps[len(steps)-1]
		if last.Name != procgroup.ComponentCloudControllerManager || !steps[len(steps)-2].Name.IsControlPlane() {
			t.Fatalf("last two steps %s, %s: want the control plane, then the CCM", steps[len(steps)-2].Name, last.Name)
		}
		if len(last.Spec.Argv) != 1 || last.Prepare == nil || last.Ready == nil {
			t.Fatalf("CCM step %+v: want the binary alone on argv, a Prepare and a gate", last.Spec.Argv)
		}
		if !slices.Equal(last.Spec.Env, s.CloudControllerManagerEnv()) || !slices.Contains(last.Spec.Env, contract.EnvMaxNodes+"=3") {
			t.Fatalf("CCM env %v", last.Spec.Env)
		}
	}
}

func TestTheCCMGateWaitsForItsReadinessLineInItsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud-controller-manager.log")
	appendLine := func(line string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line + "\n")
		f.Close()
	}
	appendLine(contract.ReadyLine("demo")) // an earlier run's
	g := newLogLine(path, contract.ReadyLine("demo"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	appendLine("I1202 starting")
	if err := g.wait(ctx); err == nil {
		t.Fatal("the gate passed on an earlier run's readiness line")
	}
	appendLine(contract.ReadyLine("demo"))
	if err := g.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTheSnapshotIsWrittenBeforeTheCCMAndKeptOnRestart(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir()}
	path := s.Layout().NodesFile()
	if err := ensureSnapshot(s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("fresh nodes.json = %q, want []", b)
	}
	c := &Cluster{Name: "demo", Spec: s}
	a := instancesnapshot.Instance{Cluster: "demo", Name: "demo-a", NodeID: "a", State: instancesnapshot.StateRunning}
	b := instancesnapshot.Instance{Cluster: "demo", Name: "demo-b", NodeID: "b", State: instancesnapshot.StateRunning}
	for _, in := range []instancesnapshot.Instance{a, b, a} {
		if err := c.PutInstance(in); err != nil {
			t.Fatal(err)
		}
	}
	if err := ensureSnapshot(s); err != nil {
		t.Fatal(err)
	}
	list, err := c.Instances()
	if err != nil || len(list) != 2 {
		t.Fatalf("after a restart the snapshot lists %v, %v; want both guests kept", list, err)
	}
	if err := c.RemoveInstance("demo-a"); err != nil {
		t.Fatal(err)
	}
	if list, _ := c.Instances(); len(list) != 1 || list[0].Name != "demo-b" {
		t.Fatalf("after removing demo-a: %v", list)
	}
	// A bad guest is refused and the file is unchanged.
	if err := c.PutInstance(instancesnapshot.Instance{Cluster: "demo", Name: "x", NodeID: "a", State: instancesnapshot.StateRunning}); err == nil {
		t.Fatal("a record whose name NodeName does not derive was written")
	}
}

// A damaged snapshot stops the bring-up before the CCM, naming the file; edits refuse to
// start from it (invariant 14).
func TestADamagedSnapshotIsAnErrorNotAnEmptyList(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir()}
	path := s.Layout().NodesFile()
	os.WriteFile(path, []byte("[{"), 0o600)
	if err := ensureSnapshot(s); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ensureSnapshot = %v, want an error naming %s", err, path)
	}
	c := &Cluster{Name: "demo", Spec: s}
	if err := c.RemoveInstance("demo-a"); err == nil {
		t.Fatal("an edit started from a damaged snapshot")
	}
	if b, _ := os.ReadFile(path); string(b) != "[{" {
		t.Fatal("the damaged snapshot was overwritten")
	}
}

func TestTheCCMRoleGrantsNoSecretsAndNoPods(t *testing.T) {
	for _, r := range CloudControllerManagerRules {
		for _, res := range r.Resources {
			if res != "nodes" && res != "nodes/status" && res != "events" {
				t.Errorf("the CCM role grants %s", res)
			}
		}
		if slices.Contains(r.Verbs, "*") {
			t.Errorf("the CCM role grants * on %v", r.Resources)
		}
	}
}
