// Package certrenewal says which of a cluster's certificates are due for renewal, and
// reads what a DataDir holds. Every leaf certificate a cluster gets is valid for a
// limited time (a year by default); one that nothing renews stops the cluster on its
// expiry day, the failure hosted-Kubernetes users report most after leaks. The decision is
// a pure function of a certificate's validity window and the time (Policy.Due); the
// inventory is the thin I/O around it. CAs are listed but never due: rotating a CA changes
// every client's trust and is an operation of its own.
package certrenewal

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// DefaultShare renews a certificate once less than a third of its validity is left: a
// year's certificate about four months before it expires, one of a minute after 40 s.
const DefaultShare = 1.0 / 3

// Policy is how long a leaf minted now is valid and when one is renewed.
type Policy struct {
	// Validity of a leaf minted now; 0 is DefaultValidity.
	Validity time.Duration
	// Share: a leaf is renewed once less than this share of its validity is left; 0 is
	// DefaultShare. It must be above 0 and below 1.
	Share float64
}

// DefaultValidity is a leaf's validity when the policy sets none: a year.
const DefaultValidity = 365 * 24 * time.Hour

// Check says what is wrong with the policy, naming the setting.
func (p Policy) Check() error {
	if p.Validity < 0 || (p.Validity > 0 && p.Validity < 10*time.Second) {
		return fmt.Errorf("certificate validity %s: want 10s or more (or 0 for a year)", p.Validity)
	}
	if p.Share < 0 || p.Share >= 1 {
		return fmt.Errorf("renewal share %g: want more than 0 and less than 1, such as 0.33 (or 0 for a third)", p.Share)
	}
	return nil
}

// LeafValidity is the validity of a leaf minted under this policy.
func (p Policy) LeafValidity() time.Duration {
	if p.Validity <= 0 {
		return DefaultValidity
	}
	return p.Validity
}

// Due says whether a leaf valid from notBefore to notAfter is to be renewed at now: once
// less than the policy's share of its validity is left, or when it has expired or is not
// valid yet (a clock set back). A window that is empty or inverted is due: such a
// certificate verifies nowhere.
func (p Policy) Due(notBefore, notAfter, now time.Time) bool {
	share := p.Share
	if share <= 0 {
		share = DefaultShare
	}
	validity := notAfter.Sub(notBefore)
	if validity <= 0 || now.Before(notBefore) || !now.Before(notAfter) {
		return true
	}
	return notAfter.Sub(now) < time.Duration(float64(validity)*share)
}

// DueFile says whether the first certificate in certPEM is due; a file that holds none
// is due (it is minted again).
func (p Policy) DueFile(certPEM []byte, now time.Time) bool {
	c, err := parse(certPEM)
	return err != nil || p.Due(c.NotBefore, c.NotAfter, now)
}

// Cert is one certificate a DataDir holds: a PEM file, or the client certificate a
// kubeconfig embeds.
type Cert struct {
	Path      string // the file (a kubeconfig's own path for the certificate inside it)
	Subject   string // its common name
	CA        bool
	NotBefore time.Time
	NotAfter  time.Time
}

// Inventory reads every certificate under dir: each *.crt and the client certificate of
// each *.kubeconfig, sorted by expiry, soonest first. A file it cannot parse is an
// error naming it, never left out: an unread certificate would expire unseen.
func Inventory(dir string) ([]Cert, error) {
	var out []Cert
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && slices.Contains([]string{"postgres", "sock", "audit"}, d.Name()) {
			return filepath.SkipDir // a component's own (its user's, with tenant users); no certificate of ours
		}
		var certPEM []byte
		switch {
		case d.IsDir(), !d.Type().IsRegular():
			return nil // a link or a device is never followed, whoever put it there
		case strings.HasSuffix(path, ".crt"):
			if certPEM, err = os.ReadFile(path); err != nil {
				return err
			}
		case strings.HasSuffix(path, ".kubeconfig"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			certPEM = KubeconfigCert(b)
		default:
			return nil
		}
		c, err := parse(certPEM)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, Cert{Path: path, Subject: c.Subject.CommonName, CA: c.IsCA, NotBefore: c.NotBefore, NotAfter: c.NotAfter})
		return nil
	})
	slices.SortStableFunc(out, func(a, b Cert) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, err
}

// SoonestLeaf is the leaf that expires first; false when there is none.
func SoonestLeaf(certs []Cert) (Cert, bool) {
	var best Cert
	found := false
	for _, c := range certs {
		if !c.CA && (!found || c.NotAfter.Before(best.NotAfter)) {
			best, found = c, true
		}
	}
	return best, found
}

// KubeconfigCert is the client certificate a kubeconfig embeds (its current context's);
// nil when it has none or cannot be read.
func KubeconfigCert(kubeconfig []byte) []byte {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil
	}
	if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		if a, ok := cfg.AuthInfos[ctx.AuthInfo]; ok {
			return a.ClientCertificateData
		}
	}
	return nil
}

func parse(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}
