package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// FuzzClusterValidation feeds JSON to the Cluster CRD's validation, run in process as the
// front runs it on a create: the document decoded, its metadata coerced and unknown fields
// pruned, defaults set, status dropped, then the OpenAPI schema and the CEL rules. Every
// input is accepted or refused; a refusal names the field (invariant 18). What is accepted
// is what the provider relies on when it reads a Cluster, and spec.account stays immutable.
func FuzzClusterValidation(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"demo"},"spec":{"account":"acme"}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"big-1","namespace":"acme"},"spec":{"account":"acme","running":false,"maxNodes":1000,"podsPerNode":250}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"Demo_1"},"spec":{"account":"acme"}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"demo"},"spec":{"account":"-x-","maxNodes":-1,"podsPerNode":0}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"demo"},"spec":{"maxNodes":"ten","unknown":1}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"demo"},"spec":null,"status":{"phase":"Ready"}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":"demo"}`,
		`{"apiVersion":"v1","kind":"Node","metadata":{"name":"demo"},"spec":{"account":"acme"}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"shop"},"spec":{"account":"acme","extraNames":["api.shop.example","www.shop.example"]}}`,
		`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"shop"},"spec":{"account":"acme","extraNames":["API.shop","nodot","a..b","x.example","x.example"]}}`,
		`[]`, `null`, `{"oops"`,
	} {
		f.Add([]byte(seed))
	}
	a := newAdmission(f, "clusters.socialweb.computer")
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, errs, err := a.create(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refused document gets an empty message")
			}
			return // not a JSON object: there is no field to name
		}
		if len(errs) > 0 {
			for _, e := range errs {
				if !namesField(e) {
					t.Errorf("refused with %q, which names no field", e.Error())
				}
			}
			return
		}
		// Accepted: the provider reads it into its Go type and gets what it relies on.
		var c Cluster
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &c); err != nil {
			t.Fatalf("accepted %s, but the provider cannot read it: %v", b, err)
		}
		if len(c.Name) > 40 || !nameRE.MatchString(c.Name) || !accountRE.MatchString(c.Spec.Account) || len(c.Spec.Account) > 63 ||
			c.Spec.Running == nil || c.Spec.MaxNodes < 0 || c.Spec.MaxNodes > 1000 || c.Spec.PodsPerNode < 1 || c.Spec.PodsPerNode > 250 {
			t.Fatalf("accepted %s as %+v, %+v", b, c.ObjectMeta, c.Spec)
		}
		for _, n := range c.Spec.ExtraNames { // what frontdoor.Names.WithClaims and a certificate take
			if len(n) > 253 || !extraNameRE.MatchString(n) || slices.ContainsFunc(strings.Split(n, "."), func(l string) bool { return len(l) > 63 }) {
				t.Fatalf("accepted %s with the extra name %q", b, n)
			}
		}
		// An update that changes nothing passes; one that changes spec.account is refused,
		// naming it.
		old := runtime.DeepCopyJSON(obj)
		if errs := a.update(obj, old); len(errs) > 0 {
			t.Fatalf("an update of %s that changes nothing: %v", b, errs)
		}
		old["spec"].(map[string]any)["account"] = c.Spec.Account + "x"
		if errs := a.update(obj, old); !strings.Contains(errs.ToAggregate().Error(), "spec.account") {
			t.Fatalf("an update of %s that changes spec.account: %v; want it refused, naming spec.account", b, errs)
		}
	})
}

// What the provider relies on (clusterprovider.ValidateName; the account is a label too).
var (
	nameRE    = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	accountRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// A DNS-1123 subdomain of two labels or more.
	extraNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

// namesField: the error's path names the field, or, when its path is the root (a rule on
// the whole object, a format check), its message names the field's path: the CRDs' own
// messages start with it ("metadata.name: want ..."); the schema's format check ends with
// it ("... with format int32 in spec.podsPerNode").
func namesField(e *field.Error) bool {
	if e.Field != "" && e.Field != "<nil>" {
		return true
	}
	for _, p := range []string{"metadata.", "spec.", "status."} {
		if strings.Contains(e.Detail, p) {
			return true
		}
	}
	return false
}

// admission is the front's handling of one CRD's objects, in process.
type admission struct {
	kind       string
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

func newAdmission(tb testing.TB, crdName string) *admission {
	tb.Helper()
	crds, err := CRDs()
	if err != nil {
		tb.Fatal(err)
	}
	for _, crd := range crds {
		if crd.Name != crdName {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			tb.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			tb.Fatal(err)
		}
		sv, _, err := apiservervalidation.NewSchemaValidator(&internal)
		if err != nil {
			tb.Fatal(err)
		}
		return &admission{kind: crd.Spec.Names.Kind, structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
	}
	tb.Fatalf("no CRD %s", crdName)
	return nil
}

// create is what the front does with a JSON document posted to create an object: the
// admitted object, or the field errors that refuse it, or an error when it is not a JSON
// object at all.
func (a *admission) create(b []byte) (map[string]any, field.ErrorList, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(b, &obj); err != nil {
		return nil, nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, nil, errors.New("not a JSON object: null")
	}
	u := &unstructured.Unstructured{Object: obj}
	var errs field.ErrorList
	if u.GetKind() != a.kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), "must be "+a.kind))
	}
	if u.GetAPIVersion() != APIVersion {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), "must be "+APIVersion))
	}
	if len(errs) > 0 {
		return nil, errs, nil
	}
	// Decoding: metadata coerced (malformed fields dropped), unknown fields pruned, defaults.
	meta, found, err := schemaobjectmeta.GetObjectMeta(obj, true)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}, nil
	}
	structuralpruning.Prune(obj, a.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, a.structural)
	if err := schemaobjectmeta.Coerce(nil, obj, a.structural, false, true); err != nil {
		return nil, field.ErrorList{err}, nil
	}
	if found {
		if err := schemaobjectmeta.SetObjectMeta(obj, meta); err != nil {
			return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}, nil
		}
	}
	structuraldefaulting.Default(obj, a.structural)
	delete(obj, "status") // a create cannot set it: the status subresource does
	if u.GetName() == "" {
		return nil, field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")}, nil
	}
	errs = apiservervalidation.ValidateCustomResource(nil, obj, a.schema)
	if !blocking(errs) {
		cerrs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, cerrs...)
	}
	if len(errs) > 0 {
		return nil, errs, nil
	}
	return obj, nil, nil
}

// update is the validation of an update of old to obj (both admitted objects).
func (a *admission) update(obj, old map[string]any) field.ErrorList {
	errs := apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, a.schema)
	if !blocking(errs) {
		cerrs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, old, celconfig.RuntimeCELCostBudget)
		errs = append(errs, cerrs...)
	}
	return errs
}

// blocking: errors after which the front does not run the CEL rules.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// The in-process admission is the front's: it accepts what the front accepts and refuses,
// naming the field, what it refuses (so the fuzz target above checks something).
func TestClusterAdmission(t *testing.T) {
	a := newAdmission(t, "clusters.socialweb.computer")
	doc := func(name, spec string) string {
		return `{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","metadata":{"name":"` + name + `"},"spec":` + spec + `}`
	}
	for _, tc := range []struct{ doc, want string }{
		{doc("demo", `{"account":"acme"}`), ""},
		{doc("demo", `{"account":"acme","running":false,"maxNodes":1000,"podsPerNode":250,"extra":1}`), ""},
		{doc("Demo_1", `{"account":"acme"}`), "metadata.name: want 1-40 lowercase letters"},
		{doc(strings.Repeat("a", 41), `{"account":"acme"}`), "metadata.name: want 1-40"},
		{doc("demo", `{}`), "spec.account: Required value"},
		{doc("demo", `{"account":"-x"}`), "spec.account: Invalid value"},
		{doc("demo", `{"account":"acme","maxNodes":1001}`), "spec.maxNodes: Invalid value"},
		{doc("demo", `{"account":"acme","podsPerNode":0}`), "spec.podsPerNode: Invalid value"},
		{doc("demo", `{"account":"acme","maxNodes":"ten"}`), "spec.maxNodes: Invalid value"},
		{doc("demo", `{"account":"acme","sleepAfter":"15m"}`), ""},
		{doc("demo", `{"account":"acme","sleepAfter":"1h30m"}`), ""},
		{doc("demo", `{"account":"acme","sleepAfter":"0s"}`), "spec.sleepAfter: want a duration of 1s or more"},
		{doc("demo", `{"account":"acme","sleepAfter":"soon"}`), "sleepAfter"},
		{doc("demo", `null`), "spec: Required value"},
		{`{"apiVersion":"socialweb.computer/v1alpha1","kind":"Cluster","spec":{"account":"acme"}}`, "metadata.name: Required value"},
		{`{"apiVersion":"v1","kind":"Cluster","metadata":{"name":"demo"},"spec":{"account":"acme"}}`, "apiVersion: Invalid value"},
		{`[]`, "not a JSON object"},
	} {
		obj, errs, err := a.create([]byte(tc.doc))
		got := ""
		if err != nil {
			got = err.Error()
		} else if len(errs) > 0 {
			got = errs.ToAggregate().Error()
		}
		if tc.want == "" && (got != "" || obj == nil) || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q; want %q", tc.doc, got, tc.want)
		}
	}
	obj, _, _ := a.create([]byte(doc("demo", `{"account":"acme"}`)))
	spec := obj["spec"].(map[string]any)
	if spec["running"] != true || spec["podsPerNode"] != int64(110) || spec["maxNodes"] != int64(0) {
		t.Errorf("defaults: spec %v, want running true, podsPerNode 110, maxNodes 0", spec)
	}
}
