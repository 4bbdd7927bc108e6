package clusterprovider

import (
	"context"
	"fmt"
	"os"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/nodejoin"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

// MaxJoinTTL bounds a join token's life: a guest that has not joined by then needs new
// material.
const MaxJoinTTL = 24 * time.Hour

// JoinMaterial is everything a real guest needs to join the cluster, and nothing more.
type JoinMaterial struct {
	Guest               nodeprovider.Guest
	Token               nodejoin.Token // inside BootstrapKubeconfig and UserData; never on argv
	Expires             time.Time
	URL                 string
	CACert              []byte
	BootstrapKubeconfig []byte
	UserData            []byte // #cloud-config
}

// JoinMaterial mints a bootstrap token for the guest nodeID, valid for ttl, and renders its
// bootstrap kubeconfig and cloud-init user data. The token can only create a CSR for a
// kubelet client certificate, which the controller-manager approves and signs (TLS
// bootstrapping); the kubelet's identity is then system:node:<name>, bounded by the Node
// authorizer.
func (c *Cluster) JoinMaterial(ctx context.Context, nodeID string, ttl time.Duration) (JoinMaterial, error) {
	return c.joinMaterial(ctx, nodeID, ttl, c.URL, "", "vm")
}

// joinMaterial is JoinMaterial with the apiserver reached at server and, when serverName
// is set, verified as that name: a real guest on this host reaches it through its
// bridge, not at the URL a VM would use. kind is the guest label its Node gets.
func (c *Cluster) joinMaterial(ctx context.Context, nodeID string, ttl time.Duration, server, serverName, kind string) (JoinMaterial, error) {
	g, err := nodeprovider.NewGuest(c.Name, nodeID)
	if err != nil {
		return JoinMaterial{}, err
	}
	if ttl <= 0 || ttl > MaxJoinTTL {
		return JoinMaterial{}, fmt.Errorf("join token ttl %s: want more than 0 and at most %s", ttl, MaxJoinTTL)
	}
	if err := bootstrapJoinRBAC(c.admin)(ctx); err != nil {
		return JoinMaterial{}, err
	}
	tok, err := nodejoin.NewToken()
	if err != nil {
		return JoinMaterial{}, err
	}
	expires := time.Now().Add(ttl)
	if _, err := c.admin.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, nodejoin.TokenSecret(tok, expires, g.Name), metav1.CreateOptions{}); err != nil {
		return JoinMaterial{}, fmt.Errorf("node %s: create its bootstrap token: %w", g.Name, err)
	}
	ca, err := os.ReadFile(c.Spec.Layout().CACert())
	if err != nil {
		return JoinMaterial{}, err
	}
	kc, err := nodejoin.BootstrapKubeconfigFor(c.Name, server, serverName, ca, tok)
	if err != nil {
		return JoinMaterial{}, err
	}
	ud, err := nodejoin.CloudConfig(g.Name, ca, kc, map[string]string{nodeprovider.NodeIDLabel: g.NodeID, nodeprovider.GuestLabel: kind})
	if err != nil {
		return JoinMaterial{}, err
	}
	return JoinMaterial{Guest: g, Token: tok, Expires: expires, URL: server, CACert: ca, BootstrapKubeconfig: kc, UserData: ud}, nil
}

// bootstrapJoinRBAC is TLS bootstrapping's RBAC, for socialweb's bootstrap group only: its
// tokens may create CSRs (system:node-bootstrapper) and have node client CSRs approved
// (nodeclient); a Node may have its own renewals approved (selfnodeclient).
func bootstrapJoinRBAC(client kubernetes.Interface) procgroup.Gate {
	bind := func(name, role string, subject rbacv1.Subject) procgroup.Gate {
		return applyRBAC(client, "bind "+subject.Name+" to "+role, nil, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedBy},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		})
	}
	bootstrappers := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: nodejoin.BootstrapGroup}
	nodes := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}
	return all(
		bind("socialweb:node-bootstrapper", "system:node-bootstrapper", bootstrappers),
		bind("socialweb:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers),
		bind("socialweb:node-autoapprove-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nodes),
		// A real guest's kube-proxy runs as its Node: it may watch Services, EndpointSlices
		// and Nodes and record events, nothing else (the built-in system:node-proxier).
		bind("socialweb:node-proxier", "system:node-proxier", nodes),
	)
}
