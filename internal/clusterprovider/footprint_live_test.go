package clusterprovider

import (
	"bufio"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The tenant control plane is built with patches to Kubernetes
// (components/patches/, ARCHITECTURE.md section 24). Each that a running cluster shows is
// checked here through what it changes, so that a Kubernetes bump that loses one, or a
// patch that breaks what it touches, fails a test. (client-go 0002, the informer
// listeners' smaller buffers, shows only in a heap profile, and so does what apiserver
// 0004 and kube-openapi 0001 save; their tests here are that /openapi/v2 and /openapi/v3
// are still whole.)
func TestThePatchedControlPlane(t *testing.T) {
	p, _ := liveProvider(t)
	c := up(t, p, "patched")
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.TenantKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sock := c.Spec.Layout().KineSocket()
	tenant := clientFor(t, c.TenantKubeconfig)

	// k8s.io/apiserver 0001: the stores of every resource share one etcd client, so
	// kine holds a handful of connections (the shared one, the compactor's, the health
	// checks'), not one per resource (about 60), and a CRD adds none.
	const most = 8
	before := kineConnections(t, sock)
	t.Logf("kine holds %d connections after bring-up", before)
	if before > most {
		t.Fatalf("kine holds %d connections after bring-up, want at most %d: does the apiserver make a client per resource again?", before, most)
	}
	crds := apiextensions.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true),
				}},
			}},
		},
	}
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	widgets := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	// The CRD's store is made at the first request for its objects, once it is served.
	eventually(t, time.Minute, "the CRD to be served", func() (bool, string) {
		_, err := widgets.List(ctx, metav1.ListOptions{})
		return err == nil, errString(err)
	})
	if after := kineConnections(t, sock); after > before {
		t.Fatalf("kine holds %d connections once a CRD is served, %d before: its store dialled a client of its own", after, before)
	}
	// A CRD's store is closed when the CRD changes, and that ends the watches on it, as
	// closing the store's own client did: its clients watch again through the new store.
	w, err := widgets.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties = map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}
	if _, err := crds.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The old store goes once its short requests have drained (at most twice the
	// request timeout, 2 minutes).
	ended := time.After(3 * time.Minute)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-ended:
			t.Fatal("a watch on the CRD's objects is still open 3 minutes after the CRD changed: closing its store no longer ends it")
		}
	}

	// k8s.io/apiserver 0004 and apiextensions-apiserver 0001: the static OpenAPI v2 spec
	// is built at its first request. /openapi/v2 must still serve every built-in type and
	// path, and a CRD's, which apiextensions merges with its own static spec.
	eventually(t, time.Minute, "/openapi/v2 with the built-in types and the CRD's", func() (bool, string) {
		raw, err := tenant.CoreV1().RESTClient().Get().AbsPath("/openapi/v2").SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		var v2 struct {
			Paths       map[string]json.RawMessage `json:"paths"`
			Definitions map[string]json.RawMessage `json:"definitions"`
		}
		if err := json.Unmarshal(raw, &v2); err != nil {
			return false, err.Error()
		}
		missing := []string{}
		for _, p := range []string{"/api/v1/namespaces", "/apis/apps/v1/namespaces/{namespace}/deployments", "/apis/example.com/v1/namespaces/{namespace}/widgets"} {
			if _, ok := v2.Paths[p]; !ok {
				missing = append(missing, "path "+p)
			}
		}
		for _, d := range []string{"io.k8s.api.core.v1.Pod", "com.example.v1.Widget"} {
			if _, ok := v2.Definitions[d]; !ok {
				missing = append(missing, "definition "+d)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d paths, %d definitions, missing %v", len(v2.Paths), len(v2.Definitions), missing)
	})

	// k8s.io/kube-openapi 0001: a group version's v3 spec is kept as its JSON only.
	// /openapi/v3 must still name each with the hash of the JSON it serves, the built-in
	// ones and the CRD's, and serve its protobuf form too.
	eventually(t, time.Minute, "/openapi/v3 with the built-in group versions and the CRD's", func() (bool, string) {
		return openAPIV3Whole(ctx, tenant.CoreV1().RESTClient(), map[string]string{
			"api/v1": "io.k8s.api.core.v1.Pod", "apis/apps/v1": "io.k8s.api.apps.v1.Deployment", "apis/example.com/v1": "com.example.v1.Widget",
		})
	})

	// k8s.io/apiserver 0002: the ValidatingAdmissionPolicy status controller's schema
	// resolver is built at its first use. Type checking must still work: a policy whose
	// expression compares a Deployment's replicas with a string gets a type warning. (The
	// resolver falls back on the apiserver's OpenAPI for what it does not know, so this
	// shows the feature works, not which of the two answered.)
	vaps := tenant.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	_, err = vaps.Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas-typo"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: `object.spec.replicas > "three"`}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the policy's type warning", func() (bool, string) {
		got, err := vaps.Get(ctx, "replicas-typo", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if tc := got.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			w := tc.ExpressionWarnings[0]
			return w.FieldRef == "spec.validations[0].expression", w.FieldRef + ": " + w.Warning
		}
		return false, "no type checking in its status yet"
	})

	// k8s.io/apiserver 0003: the MutatingAdmissionPolicy plugin fetches the OpenAPI paths
	// when it needs a type converter instead of polling them. An ApplyConfiguration
	// mutation needs one: a policy that labels new ConfigMaps must still label them.
	admission := tenant.AdmissionregistrationV1()
	fail := admissionv1.Fail
	_, err = admission.MutatingAdmissionPolicies().Create(ctx, &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "label-configmaps"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Mutations: []admissionv1.Mutation{{
				PatchType:          admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`},
			}},
			FailurePolicy:      &fail,
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admission.MutatingAdmissionPolicyBindings().Create(ctx, &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "label-configmaps"},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "label-configmaps"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	configMaps := tenant.CoreV1().ConfigMaps("default")
	// The policy takes effect once the apiserver's policy informers have it.
	eventually(t, time.Minute, "a new ConfigMap labelled by the policy", func() (bool, string) {
		cm, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "mutate-me-"}}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cm.Labels["mutated"] == "yes", fmt.Sprintf("labels %v", cm.Labels)
	})

	// k8s.io/client-go 0001: no workqueue refreshes its unfinished-work gauges, which
	// then read 0 while the queues' other metrics are kept.
	raw, err := tenant.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var queues int
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "workqueue_adds_total{") {
			queues++
		}
		for _, gauge := range []string{"workqueue_unfinished_work_seconds{", "workqueue_longest_running_processor_seconds{"} {
			if strings.HasPrefix(line, gauge) && !strings.HasSuffix(line, " 0") {
				t.Errorf("%s: a workqueue refreshes its unfinished-work gauges", line)
			}
		}
	}
	if queues == 0 {
		t.Fatal("the apiserver's /metrics has no workqueue_adds_total: the queues' metrics are gone")
	}
}

// openAPIV3Whole reads /openapi/v3 and, for each group version in want, its JSON (which
// must define want's schema, and hash to what the list says) and its protobuf form: ok,
// or what is wrong.
func openAPIV3Whole(ctx context.Context, rc rest.Interface, want map[string]string) (bool, string) {
	raw, err := rc.Get().AbsPath("/openapi/v3").DoRaw(ctx)
	if err != nil {
		return false, err.Error()
	}
	var discovery struct {
		Paths map[string]struct {
			URL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &discovery); err != nil {
		return false, err.Error()
	}
	for gv, schema := range want {
		p, ok := discovery.Paths[gv]
		if !ok {
			return false, fmt.Sprintf("/openapi/v3 lists %d group versions, not %s", len(discovery.Paths), gv)
		}
		u, err := url.Parse(p.URL)
		if err != nil {
			return false, err.Error()
		}
		hash := u.Query().Get("hash")
		body, err := rc.Get().AbsPath(u.Path).Param("hash", hash).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", p.URL, err)
		}
		if sum := fmt.Sprintf("%X", sha512.Sum512(body)); sum != hash {
			return false, fmt.Sprintf("%s: the JSON served hashes to %.16s...", p.URL, sum)
		}
		var spec struct {
			Components struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(body, &spec); err != nil {
			return false, fmt.Sprintf("%s: %v", p.URL, err)
		}
		if _, ok := spec.Components.Schemas[schema]; !ok {
			return false, fmt.Sprintf("%s: no schema %s among %d", p.URL, schema, len(spec.Components.Schemas))
		}
		pb, err := rc.Get().AbsPath(u.Path).SetHeader("Accept", "application/com.github.proto-openapi.spec.v3.v1.0+protobuf").DoRaw(ctx)
		if err != nil || len(pb) == 0 {
			return false, fmt.Sprintf("%s as protobuf: %d bytes, %v", p.URL, len(pb), err)
		}
	}
	return true, ""
}

// kineConnections counts the connections kine's unix socket has accepted and still
// holds: in /proc/net/unix each carries the listener's path, in state 03 (connected).
func kineConnections(t *testing.T, sock string) int {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		if fields := strings.Fields(s.Text()); len(fields) == 8 && fields[7] == sock && fields[5] == "03" {
			n++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func ptrTo[T any](v T) *T { return &v }

// Once its start has settled, the one-process control plane collects garbage at the idle
// setting (KUBE_CONTROL_PLANE_IDLE_GOGC, clusterstack.Spec.RuntimeEnv), which its Go
// metrics show.
func TestIdleGOGCOnceStarted(t *testing.T) {
	p, _ := liveProvider(t)
	c := up(t, p, "idlegc")
	rc := clientFor(t, c.TenantKubeconfig).CoreV1().RESTClient()
	gogc := func() string {
		raw, err := rc.Get().AbsPath("/metrics").DoRaw(context.Background())
		if err != nil {
			return err.Error()
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
				return v
			}
		}
		return "no go_gc_gogc_percent in /metrics"
	}
	// 50 through the start (25 already only if the start took more than its settling
	// time to reach Ready, on a busy host).
	t.Logf("GOGC right after the start: %s", gogc())
	eventually(t, 2*time.Minute, "GOGC 25 once the start has settled", func() (bool, string) {
		got := gogc()
		return got == "25", got
	})
}
