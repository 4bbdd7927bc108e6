package auditlog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The audit policy, read and evaluated by the apiserver's own code: no Secret or token is
// ever logged beyond its metadata, whatever the verb; a write's body is logged; probes
// and node heartbeats are not.
func TestThePolicyNeverLogsASecret(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes([]byte(Policy))
	if err != nil {
		t.Fatal(err)
	}
	eval := policy.NewPolicyRuleEvaluator(p)
	tenant := &user.DefaultInfo{Name: "socialweb:tenant-admin"}
	for _, tc := range []struct {
		attrs authorizer.AttributesRecord
		want  auditinternal.Level
	}{
		{authorizer.AttributesRecord{User: tenant, Verb: "create", Resource: "secrets", Namespace: "default", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "update", Resource: "secrets", Namespace: "default", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "patch", Resource: "secrets", Namespace: "default", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "get", Resource: "secrets", Namespace: "default", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "create", APIGroup: "authentication.k8s.io", Resource: "tokenreviews", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "create", Resource: "configmaps", Namespace: "default", ResourceRequest: true}, auditinternal.LevelRequest},
		{authorizer.AttributesRecord{User: tenant, Verb: "delete", APIGroup: "apps", Resource: "deployments", Namespace: "default", ResourceRequest: true}, auditinternal.LevelRequest},
		{authorizer.AttributesRecord{User: tenant, Verb: "list", Resource: "pods", ResourceRequest: true}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{User: tenant, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", ResourceRequest: true}, auditinternal.LevelNone},
		{authorizer.AttributesRecord{User: tenant, Verb: "get", Path: "/readyz"}, auditinternal.LevelNone},
	} {
		if got := eval.EvaluatePolicyRule(tc.attrs).Level; got != tc.want {
			t.Errorf("%s %s/%s: level %s, want %s", tc.attrs.Verb, tc.attrs.Resource, tc.attrs.Subresource, got, tc.want)
		}
	}
}

func line(i int, verb, resource string) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"a%d","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/%s/o%d","verb":"%s","user":{"username":"socialweb:tenant-admin","groups":["system:masters"]},"objectRef":{"resource":"%s","namespace":"default","name":"o%d","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-12-05T01:02:%02d.000000Z"}`,
		i, resource, i, verb, resource, i, i%60)
}

// Recent reads the newest events, across a rotation, oldest first; a torn line is
// skipped, and a log that does not exist has no events.
func TestRecentReadsAcrossARotation(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.log")
	write := func(name string, from, to int, tail string) {
		var b []byte
		for i := from; i < to; i++ {
			b = append(b, line(i, "create", "configmaps")+"\n"...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, tail...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("audit-2026-12-05T01-00-00.000.log", 0, 10, "")
	write("audit-2026-12-05T01-01-00.000.log", 10, 20, "")
	write("audit.log", 20, 23, `{"kind":"Event","verb":"cre`) // torn by a crash
	got, err := Recent(log, 5)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	if fmt.Sprint(names) != "[o18 o19 o20 o21 o22]" {
		t.Errorf("the last 5: %v", names)
	}
	e := got[4]
	if e.Verb != "create" || e.User != "socialweb:tenant-admin" || e.Resource != "configmaps" || e.Namespace != "default" || e.Code != 201 || e.Time.Second() != 22 {
		t.Errorf("event: %+v", e)
	}
	if all, _ := Recent(log, 100); len(all) != 23 {
		t.Errorf("all: %d events, want 23", len(all))
	}
	if none, err := Recent(filepath.Join(t.TempDir(), "audit.log"), 5); err != nil || len(none) != 0 {
		t.Errorf("no log yet: %v %v", none, err)
	}
	// The directory is the tenant's user's: a link it plants there is never followed.
	planted := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(planted, "audit.log")); err != nil {
		t.Fatal(err)
	}
	if _, err := Recent(filepath.Join(planted, "audit.log"), 5); err == nil {
		t.Error("a link to /dev/zero was read")
	}
}
