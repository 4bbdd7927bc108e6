package clusterprovider

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"os"

	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/pki"
)

// Identities of the cluster's own clients. The tenant's is bound to cluster-admin through a
// ClusterRoleBinding (revocable), never through system:masters; only the provider's admin
// identity is in system:masters, and nothing but the provider reads it.
const (
	AdminUser         = "socialweb:provider"
	TenantAdminUser   = "socialweb:tenant-admin"
	TenantAdminsGroup = "socialweb:tenant-admins"
	TenantAdminsCRB   = "socialweb:tenant-admins"
	// CloudControllerManagerUser is the CCM's own identity, bounded by the ClusterRole of
	// the same name (rbac.go): Nodes and Events, nothing else (seed D3, invariant 20).
	CloudControllerManagerUser = "socialweb:cloud-controller-manager"
	// KwokUser simulates the guests' kubelets: Nodes' status, their Pods, their leases.
	KwokUser = "socialweb:kwok"
	// KubeletClientUser is the apiserver's identity towards kubelets, bound to the
	// built-in system:kubelet-api-admin (the kubelet API: logs, exec, port-forward, stats)
	// and to nothing in system:masters.
	KubeletClientUser = "socialweb:apiserver-kubelet-client"
)

// EnsureCredentials mints whatever of the cluster's credentials is missing, so a restart
// reuses what exists. The CA is minted only when neither its certificate nor its key exists:
// a half-present CA is an error, not a reason to re-mint and orphan every issued credential.
//
// sans are the extra names and addresses the apiserver's serving certificate must carry; a
// certificate that lacks one (the front door was turned on, an address added) is minted
// again, signed by the same CA, so no client's trust changes. tenantURL is the server the
// tenant's kubeconfig names ("" means the apiserver's own loopback URL): the front door's
// name for the cluster when there is one.
//
// A leaf certificate, or a kubeconfig's client certificate, that the policy says is due
// (certrenewal.Policy.Due: less than its share of validity left) is minted again by the
// same CA with a fresh key, valid for the policy's validity: every start of a cluster
// renews what is due, and a cluster that starts at least once per renewal window never
// meets an expired certificate. CAs are never renewed here.
//
// While a renewal is requested (Layout.RenewRequest: by the operator, or by the loop when
// a leaf fell due while the cluster ran) every leaf is due, and the request is removed
// once they are all written: a run killed halfway leaves it, and the next one renews all
// of them again.
func EnsureCredentials(s clusterstack.Spec, sans []string, tenantURL string, policy certrenewal.Policy) error {
	now := time.Now()
	leaf := func(x pki.Leaf) pki.Leaf {
		x.Validity = policy.LeafValidity()
		return x
	}
	l := s.Layout()
	renewAll, err := certrenewal.Take(l.RenewRequest())
	if err != nil {
		return fmt.Errorf("renewal request: %w", err)
	}
	policy.RenewAll = renewAll
	ca, err := ensureCA(l.CACert(), l.CAKey(), s.Name+"-ca")
	if err != nil {
		return err
	}
	fp, err := ensureCA(l.FrontProxyCACert(), l.FrontProxyCAKey(), s.Name+"-front-proxy-ca")
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	for _, n := range sans {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, n)
		}
	}
	serving := leaf(pki.Leaf{CommonName: "kube-apiserver", Server: true, DNSNames: dns, IPs: ips})
	if b, err := os.ReadFile(l.APIServerCert()); err == nil && !pki.Covers(b, dns, ips) {
		if err := os.Remove(l.APIServerCert()); err != nil {
			return err
		}
	}
	if err := ensureLeaf(ca, l.APIServerCert(), l.APIServerKey(), serving, policy, now); err != nil {
		return err
	}
	if err := ensureLeaf(fp, l.FrontProxyClientCert(), l.FrontProxyClientKey(), leaf(pki.Leaf{CommonName: "front-proxy-client"}), policy, now); err != nil {
		return err
	}
	// Minted apart from the kubeconfigs (the apiserver reads it by file), for tenants only:
	// the front has no kubelets. A DataDir older than this certificate gets it on its next
	// start.
	if !s.Front {
		if err := ensureLeaf(ca, l.KubeletClientCert(), l.KubeletClientKey(), leaf(pki.Leaf{CommonName: KubeletClientUser}), policy, now); err != nil {
			return err
		}
	}
	if !exists(l.ServiceAccountKey()) || !exists(l.ServiceAccountPub()) {
		priv, pub, err := pki.NewKeyPair()
		if err != nil {
			return err
		}
		if err := writeSecret(l.ServiceAccountKey(), priv); err != nil {
			return err
		}
		if err := writeSecret(l.ServiceAccountPub(), pub); err != nil {
			return err
		}
	}
	kubeconfigs := []struct {
		path string
		leaf pki.Leaf
	}{
		{l.AdminKubeconfig(), pki.Leaf{CommonName: AdminUser, Organization: []string{"system:masters"}}},
		{l.ControllerManagerKubeconfig(), pki.Leaf{CommonName: "system:kube-controller-manager"}},
		{l.SchedulerKubeconfig(), pki.Leaf{CommonName: "system:kube-scheduler"}},
		{l.TenantKubeconfig(), pki.Leaf{CommonName: TenantAdminUser, Organization: []string{TenantAdminsGroup}}},
		{l.CloudControllerManagerKubeconfig(), pki.Leaf{CommonName: CloudControllerManagerUser}},
		{l.KwokKubeconfig(), pki.Leaf{CommonName: KwokUser}},
	}
	if tenantURL == "" {
		tenantURL = s.URL()
	}
	for _, k := range kubeconfigs {
		server := s.URL() // the provider's own clients go straight to the apiserver
		if k.path == l.TenantKubeconfig() {
			server = tenantURL
		}
		if err := ensureKubeconfig(s.Name, server, ca, k.path, leaf(k.leaf), policy, now); err != nil {
			return err
		}
	}
	if err := ensureSecretFile(l.EncryptionConfig(), encryptionConfig); err != nil {
		return err
	}
	if err := ensureSecretFile(l.PostgresSuperuserPassword(), password); err != nil {
		return err
	}
	if err := ensureSecretFile(l.KinePGPass(), func() ([]byte, error) {
		pw, err := password()
		if err != nil {
			return nil, err
		}
		// libpq passfile: host:port:database:user:password. pgx matches a unix-socket
		// connection as host "localhost"; "*" matches it whatever the client calls it.
		return fmt.Appendf(nil, "*:5432:*:%s:%s\n", clusterstack.KineRole, pw), nil
	}); err != nil {
		return err
	}
	if policy.RenewAll {
		return certrenewal.Done(l.RenewRequest())
	}
	return nil
}

// ensureKubeconfig (re)writes path when it is missing or names another server (the port
// lease can change between runs when the book was lost, the front door be turned on or
// off) or when its client certificate is due; the client key is kept otherwise.
func ensureKubeconfig(cluster, server string, ca *pki.CA, path string, leaf pki.Leaf, policy certrenewal.Policy, now time.Time) error {
	if b, err := os.ReadFile(path); err == nil && kubeconfigServer(b) == server && !policy.DueFile(certrenewal.KubeconfigCert(b), now) {
		return nil
	}
	cert, key, err := ca.Issue(leaf)
	if err != nil {
		return err
	}
	kc, err := pki.Kubeconfig(cluster, server, ca.CertPEM, cert, key)
	if err != nil {
		return err
	}
	return writeSecret(path, kc)
}

func ensureCA(certPath, keyPath, cn string) (*pki.CA, error) {
	cert, cerr := os.ReadFile(certPath)
	key, kerr := os.ReadFile(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		return pki.LoadCA(cert, key)
	case os.IsNotExist(cerr) && os.IsNotExist(kerr):
		ca, err := pki.NewCA(cn)
		if err != nil {
			return nil, err
		}
		if err := writeSecret(keyPath, ca.KeyPEM); err != nil {
			return nil, err
		}
		return ca, writeSecret(certPath, ca.CertPEM)
	default:
		return nil, fmt.Errorf("CA %s: only one of certificate and key is readable (%v, %v); restore both or remove the cluster", certPath, cerr, kerr)
	}
}

// ensureLeaf mints the leaf when its certificate or key is missing, or when the
// certificate is due for renewal.
func ensureLeaf(ca *pki.CA, certPath, keyPath string, leaf pki.Leaf, policy certrenewal.Policy, now time.Time) error {
	if b, err := os.ReadFile(certPath); err == nil && exists(keyPath) && !policy.DueFile(b, now) {
		return nil
	}
	cert, key, err := ca.Issue(leaf)
	if err != nil {
		return err
	}
	if err := writeSecret(keyPath, key); err != nil {
		return err
	}
	return writeSecret(certPath, cert)
}

func ensureSecretFile(path string, mint func() ([]byte, error)) error {
	if exists(path) {
		return nil
	}
	b, err := mint()
	if err != nil {
		return err
	}
	return writeSecret(path, b)
}

func password() ([]byte, error) {
	b, err := pki.Random(24)
	if err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(b)), nil
}

// encryptionConfig encrypts Secrets at rest in the tenant's datastore with a per-cluster
// secretbox key; identity stays readable so a restore of plain data still works.
func encryptionConfig() ([]byte, error) {
	key, err := pki.Random(32)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - secretbox:
          keys:
            - name: key1
              secret: %s
      - identity: {}
`, base64.StdEncoding.EncodeToString(key)), nil
}

func writeSecret(path string, b []byte) error { return atomicfile.WriteFile(path, b, 0o600) }

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func kubeconfigServer(b []byte) string {
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return ""
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return ""
	}
	if c, ok := cfg.Clusters[ctx.Cluster]; ok {
		return c.Server
	}
	return ""
}

// nodeClient is a client of the cluster's apiserver that authenticates as the Node name
// itself, system:node:<name> in system:nodes, as the guest's kubelet would: the Node
// authorizer and NodeRestriction bound it. Its key lives in memory only.
func nodeClient(s clusterstack.Spec, name string) (kubernetes.Interface, error) {
	l := s.Layout()
	certPEM, err := os.ReadFile(l.CACert())
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(l.CAKey())
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}})
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: s.URL(), Timeout: 10 * time.Second, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: cert, KeyData: key}}
	return kubernetes.NewForConfig(cfg)
}
