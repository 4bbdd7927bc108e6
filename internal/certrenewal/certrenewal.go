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

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/pki"
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
	// RenewAll makes every leaf due whatever its window: a renewal was requested.
	RenewAll bool
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
	// A leaf due sooner than a restart can renew it would have every restart end due again.
	if due := time.Duration(float64(p.LeafValidity()) * (1 - p.share())); due < MinTimeToDue {
		return fmt.Errorf("validity %s with renewal share %g: a leaf is due %s after it is minted; want %s or more (a longer validity, or a smaller share)",
			p.LeafValidity(), p.share(), due.Round(100*time.Millisecond), MinTimeToDue)
	}
	return nil
}

// MinTimeToDue is the least time from a leaf's minting to its renewal that a policy may
// give: more than a restart of the cluster takes, and than the look between two checks.
const MinTimeToDue = 15 * time.Second

// LeafValidity is the validity of a leaf minted under this policy.
func (p Policy) LeafValidity() time.Duration {
	if p.Validity <= 0 {
		return DefaultValidity
	}
	return p.Validity
}

// Due says whether a leaf valid from notBefore to notAfter is to be renewed at now: once
// less than the policy's share of its validity is left (RenewAt), or when it has expired or
// is not valid yet (a clock set back). A window that is empty or inverted is due: such a
// certificate verifies nowhere. With RenewAll every leaf is due.
func (p Policy) Due(notBefore, notAfter, now time.Time) bool {
	if p.RenewAll || !notAfter.After(notBefore) || now.Before(notBefore) || !now.Before(notAfter) {
		return true
	}
	return !now.Before(p.RenewAt(notBefore, notAfter))
}

// RenewAt is the moment a leaf valid from notBefore to notAfter becomes due: from then on
// less than the policy's share of its validity is left. Its validity is counted from its
// minting, pki.Backdate after its NotBefore (every leaf here is minted by pki): with
// certificates of 40 s, counting the minute of backdating would make a leaf due at once.
// A window no longer than the backdating is counted whole. An empty or inverted window is
// due at once (the zero time).
func (p Policy) RenewAt(notBefore, notAfter time.Time) time.Time {
	if !notAfter.After(notBefore) {
		return time.Time{}
	}
	minted := notBefore.Add(pki.Backdate)
	if !minted.Before(notAfter) {
		minted = notBefore
	}
	return notAfter.Add(-time.Duration(float64(notAfter.Sub(minted)) * p.share()))
}

// NextRenewal is the soonest moment one of the leaves in certs becomes due; false when
// certs holds no leaf. The leaves of a cluster are renewed together, at this moment: they
// were minted together, and one renewal restarts the components once, not once a leaf.
func (p Policy) NextRenewal(certs []Cert) (time.Time, bool) {
	var next time.Time
	found := false
	for _, c := range certs {
		if c.CA {
			continue
		}
		if at := p.RenewAt(c.NotBefore, c.NotAfter); !found || at.Before(next) {
			next, found = at, true
		}
	}
	return next, found
}

// CheckEvery is how often a running cluster's certificates (and a request to renew them)
// are looked at: a tenth of the renewal window (the share of the validity left when a leaf
// is due), between a second and 10 s. A year's certificate is looked at every 10 s, so an
// operator's request is taken within 10 s; one of 30 s every second, so a renewal begins
// within 1 s of its moment, 9 s before its expiry. A look is a stat and a digest of a
// dozen small files.
func (p Policy) CheckEvery() time.Duration {
	every := time.Duration(float64(p.LeafValidity()) * p.share() / 10)
	return min(max(every, time.Second), 10*time.Second)
}

func (p Policy) share() float64 {
	if p.Share <= 0 {
		return DefaultShare
	}
	return p.Share
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

// Inventory reads the certificates the provider mints in the DataDir dir: each
// pki/*.crt, and the client certificate of each *.kubeconfig at its top, sorted by expiry,
// soonest first. Nothing else is read: a real guest's kubelet certificate (in its /var
// overlay under guests/), an image's files, Postgres' own, are not the provider's to renew,
// and one listed would make a renewal due that no renewal could satisfy. A file it cannot
// parse is an error naming it, never left out: an unread certificate would expire unseen.
// A link or a device is never followed, whoever put it there.
func Inventory(dir string) ([]Cert, error) {
	var out []Cert
	read := func(sub, suffix string, extract func([]byte) []byte) error {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), suffix) {
				continue
			}
			path := filepath.Join(dir, sub, e.Name())
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			c, err := parse(extract(b))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, Cert{Path: path, Subject: c.Subject.CommonName, CA: c.IsCA, NotBefore: c.NotBefore, NotAfter: c.NotAfter})
		}
		return nil
	}
	if err := read("pki", ".crt", func(b []byte) []byte { return b }); err != nil {
		return nil, err
	}
	if err := read("", ".kubeconfig", KubeconfigCert); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Cert) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, nil
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

// Issued is when the oldest of the leaves in certs was minted (a leaf is valid from
// pki.Backdate before its minting); false when there is none. Once every leaf was renewed
// it is at or after the renewal's start.
func Issued(certs []Cert) (time.Time, bool) {
	var oldest time.Time
	found := false
	for _, c := range certs {
		if !c.CA && (!found || c.NotBefore.Before(oldest)) {
			oldest, found = c.NotBefore, true
		}
	}
	return oldest.Add(pki.Backdate), found
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

// A renewal request is a file in a cluster's DataDir (clusterstack.Layout.RenewRequest):
// every leaf of the cluster is minted again at the next EnsureCredentials, which removes
// it once the new files are written. It is written by the operator (socialweb-kcp certs
// rotate) or by the provider when a leaf falls due while the cluster runs; being a file,
// it outlives a provider killed between the decision and the renewal, and the next run
// finishes what the last began.

// Request asks for every leaf under the DataDir whose request file is path to be renewed;
// why says who asked, for the operator reading the file.
func Request(path, why string) error {
	return atomicfile.WriteFile(path, []byte(why+"\n"), 0o600)
}

// Requested says whether a renewal is asked for at path, or taken and not done yet.
func Requested(path string) bool {
	for _, p := range []string{path, taken(path)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// Take says whether a renewal is asked for at path, and takes it: the request is renamed
// aside (path.taken) before the renewal begins, so a request written while it runs stays
// for the next one instead of being removed with this one; a taken request that a crash
// left is taken again.
func Take(path string) (bool, error) {
	err := os.Rename(path, taken(path))
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	_, err = os.Lstat(taken(path))
	return err == nil, nil
}

// Done removes the request Take took, once its renewal is written; none is no error.
func Done(path string) error {
	if err := os.Remove(taken(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func taken(path string) string { return path + ".taken" }
