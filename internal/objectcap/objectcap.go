// Package objectcap holds a tenant cluster to a cap on the objects it stores. The
// provider counts the cluster's live objects in its datastore (Count) every few seconds;
// at the cap it puts a ValidatingAdmissionPolicy in the tenant apiserver that refuses
// every create by the tenant with a message naming the cap (Policy), and below the cap it
// takes it away. Reads, updates and deletes go on: a tenant at its cap deletes to create.
//
// The cap is soft by construction: creates between two counts pass, so a cluster may
// stand a few objects over it. It cannot be held in the datastore instead: kine answers a
// create whose insert the database refused as if it had succeeded (its LogStructured.Create
// drops the error when the key does not exist), so a refusing trigger would lose writes
// the apiserver acknowledged.
package objectcap

import (
	"fmt"
	"strconv"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the policy's and its binding's name in every tenant apiserver.
const Name = "socialweb-object-cap"

// CountSQL counts the live keys of kine's table: each key's newest row, not a deletion,
// under /registry/. Events and leases are not counted (the control plane makes them,
// and they expire or are renewed), as they are not refused.
const CountSQL = `SELECT count(*) FROM (
	SELECT DISTINCT ON (name) deleted FROM kine
	WHERE name LIKE '/registry/%' AND name NOT LIKE '/registry/events/%' AND name NOT LIKE '/registry/leases/%'
	ORDER BY name, id DESC) AS newest
WHERE deleted = 0`

// Enforce says whether the policy should stand: the cluster holds cap objects or more.
// A cap of 0 is none.
func Enforce(count, cap int64) bool { return cap > 0 && count >= cap }

// Message is what a tenant's refused create says.
func Message(cluster string, cap int64) string {
	return fmt.Sprintf("cluster %s is at its cap of %d stored objects (the Cluster's spec.resources.objects): delete objects to create more; reads, updates and deletes still work", cluster, cap)
}

// exempt are the control plane's own identities, whose creates (a namespace's service
// account, a controller's replica set) are never refused: the cap is the tenant's. The
// provider and the apiserver itself are in system:masters.
var exempt = []string{"system:kube-controller-manager", "system:kube-scheduler", "socialweb:cloud-controller-manager"}

// Policy is the policy and its binding that refuse the tenant's creates, for cluster at cap.
func Policy(cluster string, cap int64) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	users := ""
	for i, u := range exempt {
		if i > 0 {
			users += ", "
		}
		users += strconv.Quote(u)
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "socialweb-kcp"}
	p := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
				}}},
				ExcludeResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					// Not stored, or not counted: reviews, events, leases.
					Rule: admissionv1.Rule{APIGroups: []string{"authentication.k8s.io", "authorization.k8s.io", "events.k8s.io", "coordination.k8s.io", ""},
						APIVersions: []string{"*"}, Resources: []string{"tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews", "localsubjectaccessreviews", "selfsubjectreviews", "selfsubjectrulesreviews", "events", "leases"}},
				}}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "the-tenant",
				Expression: "!('system:masters' in request.userInfo.groups) && !(request.userInfo.username in [" + users + "]) && !request.userInfo.username.startsWith('system:serviceaccount:kube-system:') && !request.userInfo.username.startsWith('system:node:')",
			}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: Message(cluster, cap)}},
		},
	}
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return p, b
}
