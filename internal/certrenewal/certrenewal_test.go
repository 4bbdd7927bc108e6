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
			nb, na := t0, t0.Add(validity)
			wasDue := false
			for step := -20; step <= 220; step++ {
				now := nb.Add(time.Duration(float64(validity) * float64(step) / 200))
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
