package clusterprovider

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/procgroup"
)

// bootstrapTenantRBAC binds the tenant's group to cluster-admin. It is a binding, so the
// operator can revoke it; the tenant's certificate carries no system:masters.
func bootstrapTenantRBAC(client kubernetes.Interface) procgroup.Gate {
	return func(ctx context.Context) error {
		return poll(ctx, "bind the tenant to cluster-admin", func(ctx context.Context) (bool, error) {
			crb := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: TenantAdminsCRB, Labels: map[string]string{"app.kubernetes.io/managed-by": "socialweb-clusterprovider"}},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: TenantAdminsGroup}},
			}
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return true, nil
			}
			return false, err
		})
	}
}
