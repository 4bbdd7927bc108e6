package clusterstack

import (
	"slices"
	"testing"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The audit policy, read and evaluated by the apiserver's own code: no Secret or token is
// ever logged beyond its metadata, whatever the verb; a write's body is logged; probes
// and node heartbeats are not.
func TestTheAuditPolicyNeverLogsASecret(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes([]byte(AuditPolicyYAML))
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

// The tenant apiserver writes an audit log under the DataDir's logs, bounded; the
// front's, the operator's, has none.
func TestOnlyTenantApiserversAudit(t *testing.T) {
	s := Spec{Name: "demo", DataDir: "/data/demo", BinDir: "/bin", APIServerPort: 30001}
	argv := s.APIServerArgv()
	for _, want := range []string{"--audit-policy-file=/data/demo/audit-policy.yaml", "--audit-log-path=/data/demo/logs/audit.log", "--audit-log-maxsize=10", "--audit-log-maxbackup=2"} {
		if !slices.Contains(argv, want) {
			t.Errorf("tenant apiserver argv lacks %s", want)
		}
	}
	s.Front = true
	if slices.ContainsFunc(s.APIServerArgv(), func(a string) bool { return len(a) > 8 && a[:8] == "--audit-" }) {
		t.Error("the front's apiserver audits")
	}
}
