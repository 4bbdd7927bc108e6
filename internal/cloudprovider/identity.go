package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrAdminCredential: the CCM was given an admin's credential.
var ErrAdminCredential = errors.New("refusing an admin credential")

// RefuseAdminByIdentity asks the apiserver who the CCM's credential is and what it may do,
// and refuses an admin: a member of system:masters, or one allowed every verb on every
// resource (cluster-admin by binding). A credential renamed to hide its name is caught here
// (invariant 20). A failure to ask is an error too: the CCM does not run unverified.
func RefuseAdminByIdentity(ctx context.Context, client kubernetes.Interface) error {
	who, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("identity check: SelfSubjectReview: %w", err)
	}
	rules, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authzv1.SelfSubjectRulesReview{
		Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: metav1.NamespaceSystem},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("identity check: SelfSubjectRulesReview: %w", err)
	}
	user := who.Status.UserInfo
	if why := AdminEvidence(user.Groups, rules.Status.ResourceRules); why != "" {
		return fmt.Errorf("%w: it authenticates as %q (%s); the cloud controller manager runs only with its own scoped credential", ErrAdminCredential, user.Username, why)
	}
	return nil
}

// AdminEvidence says why an identity is an admin, or "" when it is not.
func AdminEvidence(groups []string, rules []authzv1.ResourceRule) string {
	if slices.Contains(groups, "system:masters") {
		return "member of system:masters"
	}
	for _, r := range rules {
		if slices.Contains(r.Verbs, "*") && slices.Contains(r.Resources, "*") && slices.Contains(r.APIGroups, "*") {
			return "allowed * on * in every API group"
		}
	}
	return ""
}
