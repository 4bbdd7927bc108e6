package nodejoin

import (
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestTokensHaveTheBootstrapFormatAndDiffer(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	a, _ := NewToken()
	b, _ := NewToken()
	if !re.MatchString(a.String()) || a == b {
		t.Fatalf("tokens %q, %q", a, b)
	}
}

func TestTheTokenSecretAuthenticatesOnlyAndExpires(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	s := TokenSecret(tok, exp, "demo-vm1")
	if s.Name != "bootstrap-token-abcdef" || s.Namespace != "kube-system" || s.Type != corev1.SecretTypeBootstrapToken {
		t.Fatalf("secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	d := s.StringData
	if d["expiration"] != "2026-12-02T18:00:00Z" || d["usage-bootstrap-authentication"] != "true" || d["auth-extra-groups"] != BootstrapGroup {
		t.Fatalf("data %v", d)
	}
	if _, signing := d["usage-bootstrap-signing"]; signing {
		t.Fatal("the token may sign: it should only authenticate")
	}
}

func TestTheUserDataKeepsTheTokenOffTheCommandLine(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	kc, err := BootstrapKubeconfig("demo", "https://127.0.0.1:30000", []byte("CA"), tok)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := CloudConfig("demo-vm1", []byte("CA"), kc, map[string]string{"b": "2", "a": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(ud), "#cloud-config\n") {
		t.Fatal("no #cloud-config header")
	}
	flags := strings.Join(KubeletFlags("demo-vm1", map[string]string{"b": "2", "a": "1"}), " ")
	if strings.Contains(flags, tok.Secret) || !strings.Contains(flags, "--cloud-provider=external") || !strings.Contains(flags, "--node-labels=a=1,b=2") {
		t.Fatalf("kubelet flags %q", flags)
	}
}
