package clusterprovider

import (
	"context"
	"reflect"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/procgroup"
)

var managedBy = map[string]string{"app.kubernetes.io/managed-by": "socialweb-clusterprovider"}

// bootstrapTenantRBAC binds the tenant's group to cluster-admin. It is a binding, so the
// operator can revoke it; the tenant's certificate carries no system:masters.
func bootstrapTenantRBAC(client kubernetes.Interface) procgroup.Gate {
	return applyRBAC(client, "bind the tenant to cluster-admin", nil, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: TenantAdminsCRB, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: TenantAdminsGroup}},
	})
}

// bootstrapKubeletClientRBAC lets the apiserver's kubelet-client identity use the kubelet
// API, through the role Kubernetes keeps for exactly that, so kubectl logs, exec and
// port-forward reach a guest whose kubelet authorizes by webhook.
func bootstrapKubeletClientRBAC(client kubernetes.Interface) procgroup.Gate {
	return applyRBAC(client, "let the apiserver reach its kubelets", nil, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: KubeletClientUser, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: KubeletClientUser}},
	})
}

// CloudControllerManagerRules are all the CCM may do: the cloud-node controller reads,
// updates and patches Nodes and their status, the lifecycle controller deletes Nodes whose
// guest is gone, and both record Events. No Secrets, no Pods, no Leases (it elects no
// leader: one CCM per cluster, supervised by its group).
var CloudControllerManagerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch", "update"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
}

// bootstrapCCMRBAC gives the CCM's identity exactly CloudControllerManagerRules.
func bootstrapCCMRBAC(client kubernetes.Interface) procgroup.Gate {
	return bindUserToRules(client, "grant the cloud controller manager its role", CloudControllerManagerUser, CloudControllerManagerRules)
}

// bindUserToRules is a ClusterRole named for user with rules, bound to user alone.
func bindUserToRules(client kubernetes.Interface, what, user string, rules []rbacv1.PolicyRule) procgroup.Gate {
	return applyRBAC(client, what,
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user, Labels: managedBy}, Rules: rules},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Labels: managedBy},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		})
}

// KwokRules are what kwok needs to play the guests' kubelets: report Nodes' status and
// leases, run and finish their Pods, record Events. No Secrets, no ConfigMaps: kwok starts
// no container, so it reads nothing a Pod mounts.
var KwokRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes/status", "pods/status"}, Verbs: []string{"update", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
}

// bootstrapKwokRBAC gives kwok's identity exactly KwokRules.
func bootstrapKwokRBAC(client kubernetes.Interface) procgroup.Gate {
	return bindUserToRules(client, "grant kwok its role", KwokUser, KwokRules)
}

// applyRBAC creates role (when given) and binding, or brings existing ones back to what
// they say, so a restart repairs an edited role rather than keeping a wider one.
func applyRBAC(client kubernetes.Interface, what string, role *rbacv1.ClusterRole, binding *rbacv1.ClusterRoleBinding) procgroup.Gate {
	return func(ctx context.Context) error {
		return poll(ctx, what, func(ctx context.Context) (bool, error) {
			if role != nil {
				roles := client.RbacV1().ClusterRoles()
				cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
					_, err = roles.Create(ctx, role, metav1.CreateOptions{})
				case err == nil && !reflect.DeepEqual(cur.Rules, role.Rules):
					cur.Rules = role.Rules
					_, err = roles.Update(ctx, cur, metav1.UpdateOptions{})
				}
				if err != nil {
					return false, err
				}
			}
			bindings := client.RbacV1().ClusterRoleBindings()
			cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
			case err == nil && !reflect.DeepEqual(cur.Subjects, binding.Subjects):
				// The role a binding names cannot change; its subjects can.
				cur.Subjects = binding.Subjects
				_, err = bindings.Update(ctx, cur, metav1.UpdateOptions{})
			}
			return err == nil, err
		})
	}
}
