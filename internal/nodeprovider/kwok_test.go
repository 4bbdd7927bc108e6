package nodeprovider

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestKwokConfigCarriesTheShippedStages(t *testing.T) {
	docs := strings.Split(string(KwokConfig()), "\n---\n")
	var kinds, names []string
	for _, d := range docs {
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("a document does not parse: %v\n%s", err, d)
		}
		kinds = append(kinds, m.Kind)
		names = append(names, m.Metadata.Name)
	}
	if kinds[0] != "KwokConfiguration" || len(docs) != 6 {
		t.Fatalf("kinds %v, want a KwokConfiguration and five stages", kinds)
	}
	for _, want := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("stages %v lack %s", names, want)
		}
	}
}

// A simulated guest registers as a kubelet with --cloud-provider=external does.
func TestRegisteredNodeIsWhatAnExternalCloudKubeletRegisters(t *testing.T) {
	g, _ := NewGuest("demo", "n1")
	n := RegisteredNode(g, 16)
	if n.Name != "demo-n1" || n.Annotations[KwokAnnotation] != KwokAnnotationValue || n.Labels[corev1.LabelHostname] != "demo-n1" {
		t.Fatalf("node %+v", n.ObjectMeta)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != UninitializedTaint || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("taints %v: want the uninitialized taint", n.Spec.Taints)
	}
	if pods := n.Status.Capacity[corev1.ResourcePods]; pods.Value() != 16 {
		t.Fatalf("pods capacity %v, want the cluster's pods-per-node", pods.String())
	}
}

func TestNewGuestUsesTheOneDerivation(t *testing.T) {
	g, err := NewGuest("demo", "n1")
	want, _ := NodeName("demo", "n1")
	if err != nil || g.Name != want || g.Cluster != "demo" || g.NodeID != "n1" {
		t.Fatalf("NewGuest = %+v, %v", g, err)
	}
	if _, err := NewGuest("demo", "N1"); err == nil {
		t.Fatal("a bad node id was accepted")
	}
}
