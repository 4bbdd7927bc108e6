package objectcap

import (
	"strings"
	"testing"
)

func TestEnforce(t *testing.T) {
	for _, c := range []struct {
		count, cap int64
		want       bool
	}{{10, 0, false}, {99, 100, false}, {100, 100, true}, {250, 100, true}} {
		if got := Enforce(c.count, c.cap); got != c.want {
			t.Errorf("Enforce(%d, %d) = %v", c.count, c.cap, got)
		}
	}
}

// The policy refuses creates only: by the tenant, never by the control plane or the
// provider, and says what to do.
func TestThePolicyRefusesTheTenantsCreates(t *testing.T) {
	p, b := Policy("demo", 500)
	if b.Spec.PolicyName != p.Name || string(b.Spec.ValidationActions[0]) != "Deny" {
		t.Errorf("binding %+v", b.Spec)
	}
	rule := p.Spec.MatchConstraints.ResourceRules[0]
	if len(rule.Operations) != 1 || rule.Operations[0] != "CREATE" {
		t.Errorf("operations %v", rule.Operations)
	}
	cond := p.Spec.MatchConditions[0].Expression
	for _, want := range []string{"system:masters", "system:kube-controller-manager", "system:serviceaccount:kube-system:"} {
		if !strings.Contains(cond, want) {
			t.Errorf("the match condition does not exempt %s: %s", want, cond)
		}
	}
	if msg := p.Spec.Validations[0].Message; !strings.Contains(msg, "cap of 500") || !strings.Contains(msg, "delete objects") {
		t.Errorf("message %q", msg)
	}
}
