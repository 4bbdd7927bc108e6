package certrenewal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/pki"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// Every validity, share and moment against the rules a renewal may not break.
func TestDueKeepsItsRules(t *testing.T) {
	n := 0
	for _, validity := range []time.Duration{30 * time.Second, time.Hour, DefaultValidity} {
		for _, share := range []float64{0, 0.1, DefaultShare, 0.5, 0.9} {
			p := Policy{Share: share}
			eff := share
			if eff == 0 {
				eff = DefaultShare
			}
			// As pki mints: valid from Backdate before its minting at t0.
			nb, na := t0.Add(-pki.Backdate), t0.Add(validity)
			wasDue := false
			for step := -60; step <= 220; step++ {
				now := t0.Add(time.Duration(float64(validity) * float64(step) / 200))
				due := p.Due(nb, na, now)
				n++
				left := na.Sub(now)
				switch {
				case now.Before(nb) && !due:
					t.Errorf("validity %s share %g at %s: not yet valid, yet not due", validity, share, now.Sub(nb))
				case !now.Before(na) && !due:
					t.Errorf("validity %s share %g at %s: expired, yet not due", validity, share, now.Sub(nb))
				case !now.Before(nb) && now.Before(na) && left < time.Duration(float64(validity)*eff) && !due:
					t.Errorf("validity %s share %g: %s left of %s, yet not due", validity, share, left, validity)
				case !now.Before(nb) && now.Before(na) && left > time.Duration(float64(validity)*eff) && due:
					t.Errorf("validity %s share %g: %s left of %s, yet due: renewed too early", validity, share, left, validity)
				}
				if !now.Before(nb) && wasDue && !due {
					t.Errorf("validity %s share %g at %s: due, then not due later", validity, share, now.Sub(nb))
				}
				wasDue = wasDue || (due && !now.Before(nb))
			}
		}
	}
	for _, w := range [][2]time.Time{{t0, t0}, {t0, t0.Add(-time.Hour)}} {
		if !(Policy{}).Due(w[0], w[1], t0.Add(-time.Minute)) {
			t.Errorf("window %s to %s: an empty or inverted window is not due", w[0], w[1])
		}
	}
	t.Logf("%d moments checked", n)
}

func TestAPolicyNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, ""},
		{Policy{Validity: time.Minute, Share: 0.5}, ""},
		{Policy{Validity: time.Second}, "validity 1s"},
		{Policy{Validity: -time.Hour}, "validity"},
		{Policy{Share: 1}, "share 1"},
		{Policy{Share: -0.1}, "share"},
		{Policy{Validity: 20 * time.Second}, "due 13.3s after it is minted"},
		{Policy{Validity: 40 * time.Second, Share: 0.5}, ""},
		{Policy{Validity: 40 * time.Second, Share: 0.7}, "due 12s"},
	} {
		err := tc.p.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	if v := (Policy{}).LeafValidity(); v != DefaultValidity {
		t.Errorf("default validity %s, want %s", v, DefaultValidity)
	}
}

// The inventory reads the PEM certificates and the kubeconfigs' client certificates of a
// DataDir, soonest first, flags the CAs, leaves out the postgres user's directory, and
// names a file it cannot read rather than leave it out.
func TestTheInventoryListsEveryCertificateSoonestFirst(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("demo-ca")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pki/ca.crt", ca.CertPEM)
	serving, _, err := ca.Issue(pki.Leaf{CommonName: "kube-apiserver", Server: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	write("pki/apiserver.crt", serving)
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "tenant-admin", Validity: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := pki.Kubeconfig("demo", "https://127.0.0.1:1", ca.CertPEM, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	write("tenant.kubeconfig", kc)
	write("postgres/data/server.crt", []byte("not ours"))
	// A real guest's kubelet serves with a certificate of its own, in its /var overlay: the
	// kubelet's to renew, never listed (a renewal could not make it less due).
	kubelet, _, err := ca.Issue(pki.Leaf{CommonName: "kubelet", Validity: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	write("guests/n1/fs/var/lib/kubelet/pki/kubelet.crt", kubelet)
	write("images/x/etc/ssl/expired.crt", []byte("an image's file"))

	certs, err := Inventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range certs {
		got = append(got, filepath.Base(c.Path)+" "+c.Subject)
	}
	if want := "tenant.kubeconfig tenant-admin,apiserver.crt kube-apiserver,ca.crt demo-ca"; strings.Join(got, ",") != want {
		t.Errorf("inventory = %v, want %s", got, want)
	}
	if !certs[2].CA || certs[0].CA {
		t.Errorf("CA flags wrong: %+v", certs)
	}
	if s, ok := SoonestLeaf(certs); !ok || s.Subject != "tenant-admin" {
		t.Errorf("SoonestLeaf = %+v, %v", s, ok)
	}

	write("pki/broken.crt", []byte("garbage"))
	if _, err := Inventory(dir); err == nil || !strings.Contains(err.Error(), "broken.crt") {
		t.Errorf("Inventory with a broken certificate = %v, want an error naming it", err)
	}
}

// RenewAt is the very moment Due turns true, for every validity and share: a renewal
// scheduled at RenewAt is neither early nor late.
func TestRenewAtIsWhereDueTurns(t *testing.T) {
	for _, validity := range []time.Duration{10 * time.Second, 30 * time.Second, time.Hour, DefaultValidity} {
		for _, share := range []float64{0, 0.1, DefaultShare, 0.5, 0.9} {
			p := Policy{Validity: validity, Share: share}
			nb, na := t0.Add(-pki.Backdate), t0.Add(validity)
			at := p.RenewAt(nb, na)
			if want := na.Add(-time.Duration(float64(validity) * p.share())); !at.Equal(want) {
				t.Errorf("validity %s share %g: renew at %s after minting, want %s", validity, share, at.Sub(t0), want.Sub(t0))
			}
			if p.Due(nb, na, at.Add(-time.Millisecond)) {
				t.Errorf("validity %s share %g: due 1ms before RenewAt", validity, share)
			}
			if !p.Due(nb, na, at.Add(time.Millisecond)) {
				t.Errorf("validity %s share %g: not due 1ms after RenewAt", validity, share)
			}
			if every := p.CheckEvery(); every < time.Second || every > 10*time.Second || (validity >= time.Hour && na.Sub(at) < 10*every) {
				t.Errorf("validity %s share %g: checked every %s, for a window of %s", validity, share, every, na.Sub(at))
			}
		}
	}
	if at := (Policy{}).RenewAt(t0, t0); !at.IsZero() {
		t.Errorf("an empty window renews at %s, want at once (zero)", at)
	}
}

// The soonest leaf decides; CAs are never due; no leaf, no renewal.
func TestNextRenewalIsTheSoonestLeafs(t *testing.T) {
	p := Policy{Share: 0.5}
	certs := []Cert{
		{Subject: "ca", CA: true, NotBefore: t0, NotAfter: t0.Add(time.Minute)},
		{Subject: "late", NotBefore: t0.Add(-pki.Backdate), NotAfter: t0.Add(time.Hour)},
		{Subject: "soon", NotBefore: t0.Add(-pki.Backdate), NotAfter: t0.Add(10 * time.Minute)},
	}
	if at, ok := p.NextRenewal(certs); !ok || !at.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("next renewal %s %v, want the soonest leaf's, at 5m", at.Sub(t0), ok)
	}
	if _, ok := p.NextRenewal(certs[:1]); ok {
		t.Error("a CA alone gave a renewal")
	}
}

// A request outlives its writer and is gone once done; done twice is no error.
func TestARequestIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "renew-certificates")
	if Requested(path) {
		t.Fatal("requested before any request")
	}
	if err := Request(path, "operator"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || !Requested(path) {
		t.Fatalf("request file %v %v", fi, err)
	}
	if ok, err := Take(path); !ok || err != nil || !Requested(path) {
		t.Fatalf("take: %v %v; requested while taken: %v", ok, err, Requested(path))
	}
	// A request made while the renewal runs is kept for the next.
	if err := Request(path, "again"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Done(path); err != nil {
			t.Fatal(err)
		}
	}
	if !Requested(path) {
		t.Error("the request made during the renewal went with it")
	}
	if ok, _ := Take(path); !ok {
		t.Error("the second request is not taken")
	}
	Done(path)
	if ok, _ := Take(path); ok || Requested(path) {
		t.Error("still requested once done")
	}
}
