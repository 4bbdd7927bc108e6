package clusterprovider

import (
	"context"
	"os"
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

func TestTheCCMGateWaitsForItsReadinessLine(t *testing.T) {
	var sink strings.Builder
	g := newLineGate(contract.ReadyLine("demo"), &sink)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	g.Write([]byte("[cloud-controller-manager] I1202 starting\n"))
	if err := g.wait(ctx); err == nil {
		t.Fatal("the gate passed before the readiness line")
	}
	g.Write([]byte("[cloud-controller-manager] " + contract.ReadyLine("demo") + "\n"))
	if err := g.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("[cloud-controller-manager] " + contract.ReadyLine("demo") + "\n")) // twice is fine
	if !strings.Contains(sink.String(), "I1202 starting") {
		t.Fatal("the gate swallowed the output")
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
