package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestLeafVerifiesOnlyAgainstItsOwnCA(t *testing.T) {
	a, err := NewCA("a-ca")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewCA("b-ca")
	certPEM, keyPEM, err := a.Issue(Leaf{CommonName: "socialweb:tenant-admin", Organization: []string{"socialweb:tenant-admins"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("cert and key do not pair: %v", err)
	}
	blk, _ := pem.Decode(certPEM)
	cert, _ := x509.ParseCertificate(blk.Bytes)
	verify := func(ca *CA) error {
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(a); err != nil {
		t.Fatalf("leaf does not verify against its CA: %v", err)
	}
	if err := verify(b); err == nil {
		t.Fatal("leaf of cluster a verifies against cluster b's CA (invariant 7)")
	}
}

func TestServerCertCarriesSANs(t *testing.T) {
	ca, _ := NewCA("ca")
	certPEM, _, err := ca.Issue(Leaf{CommonName: "kube-apiserver", Server: true, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(certPEM)
	cert, _ := x509.ParseCertificate(blk.Bytes)
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("localhost"); err != nil {
		t.Fatal(err)
	}
}

func TestCoversSaysWhetherEveryNameIsOnTheCertificate(t *testing.T) {
	ca, _ := NewCA("ca")
	certPEM, _, err := ca.Issue(Leaf{CommonName: "kube-apiserver", Server: true, DNSNames: []string{"localhost", "demo.kcp.example"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	lo := []net.IP{net.ParseIP("127.0.0.1")}
	for _, tc := range []struct {
		dns  []string
		ips  []net.IP
		want bool
	}{
		{nil, nil, true},
		{[]string{"localhost", "DEMO.kcp.example"}, lo, true},
		{[]string{"localhost", "other.kcp.example"}, lo, false}, // the front door's name for another cluster
		{[]string{"localhost"}, []net.IP{net.ParseIP("10.0.0.1")}, false},
	} {
		if got := Covers(certPEM, tc.dns, tc.ips); got != tc.want {
			t.Errorf("Covers(%v, %v) = %v, want %v", tc.dns, tc.ips, got, tc.want)
		}
	}
	if Covers([]byte("not a certificate"), nil, nil) {
		t.Error("an unreadable certificate covers nothing")
	}
}

func TestCARoundTripAndKubeconfig(t *testing.T) {
	ca, _ := NewCA("ca")
	again, err := LoadCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, k, _ := again.Issue(Leaf{CommonName: "x"})
	kc, err := Kubeconfig("demo", "https://127.0.0.1:30000", ca.CertPEM, c, k)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "demo" || cfg.Clusters["demo"].Server != "https://127.0.0.1:30000" {
		t.Fatalf("kubeconfig = %+v", cfg)
	}
}
