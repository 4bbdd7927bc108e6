package clusterprovider

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/nodejoin"
	"socialweb.computer/kcp/internal/processrunner"
)

// The real join path, as a VM's kubelet walks it, with nothing but the bootstrap kubeconfig.
func TestARealGuestJoinsWithOnlyItsBootstrapMaterial(t *testing.T) {
	p, _ := liveProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := up(t, p, "join")

	m, err := c.JoinMaterial(ctx, "vm1", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(m.BootstrapKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	boot := kubernetes.NewForConfigOrDie(cfg)
	// The apiserver knows a token once its informer has seen the token's Secret, a
	// moment after it is created (a kubelet retries its bootstrap the same way).
	livetest.Eventually(t, 30*time.Second, "the bootstrap token authenticates", func() (bool, string) {
		_, err := boot.Discovery().ServerVersion()
		return !apierrors.IsUnauthorized(err), fmt.Sprint(err)
	})

	t.Run("the token can only bootstrap", func(t *testing.T) {
		assertAccess(t, boot, "the bootstrap token", []access{
			{authzv1.ResourceAttributes{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}, true},
			{authzv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
			{authzv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
			{authzv1.ResourceAttributes{Verb: "create", Resource: "nodes"}, false},
		})
		if _, err := boot.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Secrets with the bootstrap token: %v, want Forbidden", err)
		}
	})

	t.Run("TLS bootstrapping yields system:node:<name>", func(t *testing.T) {
		t0 := time.Now()
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + m.Guest.Name, Organization: []string{"system:nodes"}},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
			Spec: certv1.CertificateSigningRequestSpec{
				Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certv1.KubeAPIServerClientKubeletSignerName,
				Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the bootstrap token cannot create a CSR: %v", err)
		}
		var cert []byte
		eventually(t, time.Minute, "the CSR approved and signed by the controller-manager", func() (bool, string) {
			got, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cert = got.Status.Certificate
			return len(cert) > 0, fmt.Sprintf("conditions %v", got.Status.Conditions)
		})
		t.Logf("CSR approved and signed in %.2fs", time.Since(t0).Seconds())
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		kubelet := kubernetes.NewForConfigOrDie(&rest.Config{Host: m.URL, TLSClientConfig: rest.TLSClientConfig{
			CAData: m.CACert, CertData: cert, KeyData: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		}})
		who, err := kubelet.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u := who.Status.UserInfo; u.Username != "system:node:"+m.Guest.Name || !slices.Contains(u.Groups, "system:nodes") {
			t.Fatalf("the signed certificate authenticates as %+v", u)
		}
	})

	t.Run("an expired token is refused", func(t *testing.T) {
		tok, _ := nodejoin.NewToken()
		if _, err := c.admin.CoreV1().Secrets("kube-system").Create(ctx, nodejoin.TokenSecret(tok, time.Now().Add(-time.Minute), "expired"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kc, _ := nodejoin.BootstrapKubeconfig(c.Name, c.URL, m.CACert, tok)
		cfg, _ := clientcmd.RESTConfigFromKubeConfig(kc)
		_, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("an expired token: %v, want Unauthorized", err)
		}
	})

	t.Run("the user data is #cloud-config that starts an external-cloud kubelet", func(t *testing.T) {
		if !bytes.HasPrefix(m.UserData, []byte("#cloud-config\n")) {
			t.Fatalf("user data starts %q", m.UserData[:min(20, len(m.UserData))])
		}
		var doc struct {
			WriteFiles []struct{ Path, Permissions, Content string } `json:"write_files"`
			Runcmd     [][]string                                    `json:"runcmd"`
		}
		if err := yaml.Unmarshal(m.UserData, &doc); err != nil {
			t.Fatalf("user data is not YAML: %v", err)
		}
		files := map[string]string{}
		for _, f := range doc.WriteFiles {
			files[f.Path] = f.Content
			if f.Path == nodejoin.GuestBootstrapKubeconfigPath && f.Permissions != "0600" {
				t.Errorf("the bootstrap kubeconfig is written %s, want 0600", f.Permissions)
			}
		}
		env := files[nodejoin.GuestKubeletEnvPath]
		for _, want := range []string{"--cloud-provider=external", "--bootstrap-kubeconfig=" + nodejoin.GuestBootstrapKubeconfigPath, "--hostname-override=" + m.Guest.Name} {
			if !strings.Contains(env, want) {
				t.Errorf("kubelet flags %q lack %s", env, want)
			}
		}
		if strings.Contains(env, m.Token.Secret) {
			t.Error("the token is among the kubelet's flags")
		}
		if files[nodejoin.GuestBootstrapKubeconfigPath] != string(m.BootstrapKubeconfig) || files[nodejoin.GuestCAPath] != string(m.CACert) {
			t.Error("the user data does not carry the bootstrap kubeconfig and the CA")
		}
	})

	t.Run("no process has the token on its argv", func(t *testing.T) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			argv, err := processrunner.Cmdline(atoi(e.Name()))
			if err == nil && strings.Contains(strings.Join(argv, " "), m.Token.Secret) {
				t.Errorf("pid %s has the token on its argv", e.Name())
			}
		}
	})

	if _, err := c.JoinMaterial(ctx, "vm2", 48*time.Hour); err == nil || !strings.Contains(err.Error(), "ttl") {
		t.Errorf("a 48h token: %v, want an error naming the ttl", err)
	}
}
