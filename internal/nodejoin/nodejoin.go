// Package nodejoin makes what a real guest (a VM) needs to join a tenant cluster, and
// nothing more: a bootstrap token that can only ask for a kubelet client certificate, the
// cluster CA, the apiserver URL, a bootstrap kubeconfig, and #cloud-config user data that
// starts a kubelet with --cloud-provider=external. It is pure: bytes and objects out; the
// provider creates the token Secret and hands the user data to the VM.
package nodejoin

import (
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// BootstrapGroup is the group every socialweb bootstrap token authenticates in; the
// provider binds it to node bootstrapping only (system:node-bootstrapper and the
// nodeclient auto-approval).
const BootstrapGroup = "system:bootstrappers:socialweb"

// Token is a bootstrap token, "<id>.<secret>".
type Token struct {
	ID     string // 6 of [a-z0-9], public: it names the Secret
	Secret string // 16 of [a-z0-9]
}

func (t Token) String() string { return t.ID + "." + t.Secret }

const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewToken mints a bootstrap token from crypto/rand.
func NewToken() (Token, error) {
	b := make([]byte, 22)
	if _, err := rand.Read(b); err != nil {
		return Token{}, err
	}
	for i := range b {
		b[i] = tokenChars[int(b[i])%len(tokenChars)] // 256 % 36 bias is immaterial at 16 characters
	}
	return Token{ID: string(b[:6]), Secret: string(b[6:])}, nil
}

// TokenSecret is the kube-system Secret that makes t a bootstrap token: for authentication
// only, in BootstrapGroup, expiring at expires (the controller-manager's tokencleaner
// removes it then; the apiserver refuses it from then on).
func TokenSecret(t Token, expires time.Time, node string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "bootstrap-token-" + t.ID, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "socialweb-clusterprovider"},
		},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "join token for node " + node,
			"token-id":                       t.ID,
			"token-secret":                   t.Secret,
			"expiration":                     expires.UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              BootstrapGroup,
		},
	}
}

// BootstrapKubeconfig is the kubelet's --bootstrap-kubeconfig: the cluster CA, the URL and
// the token, nothing else.
func BootstrapKubeconfig(cluster, server string, caPEM []byte, t Token) ([]byte, error) {
	return BootstrapKubeconfigFor(cluster, server, "", caPEM, t)
}

// BootstrapKubeconfigFor is BootstrapKubeconfig for an apiserver reached at an address its
// certificate does not name: the kubelet verifies it as serverName instead (and keeps that
// in the kubeconfig it writes once it has its own certificate).
func BootstrapKubeconfigFor(cluster, server, serverName string, caPEM []byte, t Token) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, TLSServerName: serverName, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["kubelet-bootstrap"] = &clientcmdapi.AuthInfo{Token: t.String()}
	cfg.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: "kubelet-bootstrap"}
	cfg.CurrentContext = "bootstrap"
	return clientcmd.Write(*cfg)
}

// Paths on the guest.
const (
	GuestCAPath                  = "/etc/kubernetes/pki/ca.crt"
	GuestBootstrapKubeconfigPath = "/etc/kubernetes/bootstrap-kubelet.conf"
	GuestKubeconfigPath          = "/etc/kubernetes/kubelet.conf"
	GuestKubeletEnvPath          = "/etc/default/kubelet"
)

// KubeletFlags are the flags the guest's kubelet runs with. The token is not among them:
// it is in the bootstrap kubeconfig, a 0600 file.
func KubeletFlags(node string, labels map[string]string) []string {
	flags := []string{
		"--cloud-provider=external",
		"--bootstrap-kubeconfig=" + GuestBootstrapKubeconfigPath,
		"--kubeconfig=" + GuestKubeconfigPath,
		"--hostname-override=" + node,
		"--rotate-certificates=true",
	}
	if len(labels) > 0 {
		var kv []string
		for k, v := range labels {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		flags = append(flags, "--node-labels="+strings.Join(kv, ","))
	}
	return flags
}

type writeFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Content     string `json:"content"`
}

// CloudConfig is the guest's user data: "#cloud-config", the CA and the bootstrap
// kubeconfig written 0600/0644 by root, the kubelet's flags in its environment file, and
// the kubelet started. The bootstrap kubeconfig holds the token; the user data is handed to
// the VM by its API, never on a command line.
func CloudConfig(node string, caPEM, bootstrapKubeconfig []byte, labels map[string]string) ([]byte, error) {
	doc := map[string]any{
		"write_files": []writeFile{
			{Path: GuestCAPath, Permissions: "0644", Owner: "root:root", Content: string(caPEM)},
			{Path: GuestBootstrapKubeconfigPath, Permissions: "0600", Owner: "root:root", Content: string(bootstrapKubeconfig)},
			{Path: GuestKubeletEnvPath, Permissions: "0644", Owner: "root:root", Content: "KUBELET_EXTRA_ARGS=\"" + strings.Join(KubeletFlags(node, labels), " ") + "\"\n"},
		},
		"runcmd": [][]string{{"systemctl", "enable", "--now", "kubelet"}},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("cloud-config: %w", err)
	}
	return append([]byte("#cloud-config\n"), b...), nil
}
