package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every field of the Go types is in its CRD's schema, so what the provider writes is what
// the front accepts.
func TestTheTypesMatchTheirSchemas(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	objs := map[string]any{
		"clusters.socialweb.computer": Cluster{Spec: ClusterSpec{Account: "a", Running: &yes, MaxNodes: 1, PodsPerNode: 1, SleepAfter: &metav1.Duration{Duration: time.Minute}, CreateAsleep: true, ExtraNames: []string{"api.a.example"}, Guest: "real",
			Resources: &ClusterResources{Memory: "1Gi", CPU: "500m", Pids: 1000, Objects: 5000}, Placement: &ClusterPlacement{Instance: "host-a"}, Datastore: DatastoreExternal},
			Status: ClusterStatus{Phase: PhaseReady, URL: "u", Instance: "i", Nodes: 1, Conditions: []metav1.Condition{{Type: "Ready"}}, LastActive: &metav1.Time{}, LastWake: "1s",
				CertificatesIssued: &metav1.Time{}, CertificatesExpire: &metav1.Time{}}},
		"nodes.socialweb.computer": Node{Spec: NodeSpec{Cluster: "c", NodeID: "n", Guest: "real"}, Status: NodeStatus{Phase: "Ready", Message: "m", Guest: "g", ProviderID: "p"}},
	}
	for _, crd := range crds {
		if crd.Spec.Group != Group || crd.Spec.Versions[0].Name != Version || crd.Spec.Versions[0].Subresources.Status == nil {
			t.Fatalf("%s: group %s version %s, status subresource %v", crd.Name, crd.Spec.Group, crd.Spec.Versions[0].Name, crd.Spec.Versions[0].Subresources)
		}
		b, _ := json.Marshal(objs[crd.Name])
		var m map[string]any
		json.Unmarshal(b, &m)
		schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, part := range []string{"spec", "status"} {
			props := schema.Properties[part].Properties
			for k := range m[part].(map[string]any) {
				if _, ok := props[k]; !ok {
					t.Errorf("%s: %s.%s is in the Go type, not in the schema", crd.Name, part, k)
				}
			}
			for k := range props {
				if _, ok := m[part].(map[string]any)[k]; !ok {
					t.Errorf("%s: %s.%s is in the schema, not in the Go type", crd.Name, part, k)
				}
			}
		}
	}
}
