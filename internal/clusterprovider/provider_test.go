package clusterprovider

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/procgroup"
)

func TestNoGuardSeamIsRefused(t *testing.T) {
	step := func(c procgroup.Component) procgroup.Step { return procgroup.Step{Name: c} }
	if err := CheckGuardSeam([]procgroup.Step{step(procgroup.ComponentAPIServer), step(procgroup.ComponentScheduler)}); !errors.Is(err, ErrNoGuardSeam) {
		t.Fatalf("a stack with nothing before the control plane: %v, want ErrNoGuardSeam", err)
	}
	if err := CheckGuardSeam([]procgroup.Step{step(procgroup.ComponentK3s)}); !errors.Is(err, ErrNoGuardSeam) {
		t.Fatalf("k3s alone: %v, want ErrNoGuardSeam", err)
	}
	if err := CheckGuardSeam([]procgroup.Step{step(procgroup.ComponentPostgres), step(procgroup.ComponentKine), step(procgroup.ComponentAPIServer)}); err != nil {
		t.Fatal(err)
	}
}

func TestStepsForPutsTheGuardBeforeTheControlPlane(t *testing.T) {
	for _, k3s := range []string{"", "/usr/local/bin/k3s"} {
		s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), BinDir: "/opt/bin", APIServerPort: 30001, K3sBinary: k3s}
		steps, err := StepsFor(StepInput{Spec: s, Identity: Identity{Cluster: "demo", UID: "u"}})
		if err != nil {
			t.Fatal(err)
		}
		var names []procgroup.Component
		for _, st := range steps {
			names = append(names, st.Name)
			if st.Ready == nil {
				t.Fatalf("%s has no gate", st.Name)
			}
		}
		if names[0] != procgroup.ComponentPostgres || names[1] != procgroup.ComponentKine || steps[1].Prepare == nil || !names[2].IsControlPlane() {
			t.Fatalf("steps %v: want postgres, kine (with the guard), then the control plane", names)
		}
		if steps[0].Spec.User != clusterstack.PostgresUser {
			t.Fatal("postgres does not run as the postgres user")
		}
	}
}

// A tenant's control plane is one step, kube-control-plane, under the three gates; a group
// a provider before it started (SplitControlPlane) is proven against the three steps it
// ran, with the argv and environment it was started with, so it is adopted as current.
func TestTheControlPlaneStepsOfEitherLayout(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), BinDir: "/opt/bin", APIServerPort: 30001}
	names := func(s clusterstack.Spec) ([]procgroup.Component, []procgroup.Step) {
		steps, err := StepsFor(StepInput{Spec: s, Identity: Identity{Cluster: "demo", UID: "u"}})
		if err != nil {
			t.Fatal(err)
		}
		var out []procgroup.Component
		for _, st := range steps {
			out = append(out, st.Name)
		}
		return out, steps
	}
	got, steps := names(s)
	if want := []procgroup.Component{procgroup.ComponentPostgres, procgroup.ComponentKine, procgroup.ComponentControlPlane, procgroup.ComponentCloudControllerManager}; !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	cp := steps[2]
	if !slices.Equal(cp.Spec.Argv, s.ControlPlaneArgv()) || !slices.Equal(cp.Spec.Env, []string{"GOGC=50", "KUBE_CONTROL_PLANE_IDLE_GOGC=25"}) || cp.Prepare == nil || cp.Live == nil {
		t.Fatalf("kube-control-plane step: argv %v env %v", cp.Spec.Argv, cp.Spec.Env)
	}

	s.SplitControlPlane = true
	got, steps = names(s)
	if want := []procgroup.Component{procgroup.ComponentPostgres, procgroup.ComponentKine, procgroup.ComponentAPIServer, procgroup.ComponentControllerManager, procgroup.ComponentScheduler, procgroup.ComponentCloudControllerManager}; !slices.Equal(got, want) {
		t.Fatalf("split steps %v, want %v", got, want)
	}
	for i, want := range map[int]struct {
		argv []string
		env  []string
	}{2: {s.APIServerArgv(), []string{"GOGC=50"}}, 3: {s.ControllerManagerArgv(), nil}, 4: {s.SchedulerArgv(), nil}} {
		if !slices.Equal(steps[i].Spec.Argv, want.argv) || !slices.Equal(steps[i].Spec.Env, want.env) {
			t.Errorf("split %s: argv %v env %v, want %v %v", steps[i].Name, steps[i].Spec.Argv, steps[i].Spec.Env, want.argv, want.env)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, bad := range []string{"", "Demo", "1demo", "demo-", "de_mo", "de.mo", strings.Repeat("a", 41), "../etc"} {
		if err := ValidateName(bad); err == nil || !strings.Contains(err.Error(), "cluster name") {
			t.Errorf("ValidateName(%q) = %v, want an error naming the field", bad, err)
		}
	}
	for _, good := range []string{"demo", "a", "tenant-42"} {
		if err := ValidateName(good); err != nil {
			t.Errorf("ValidateName(%q) = %v", good, err)
		}
	}
}

// fakeBinaries makes executables that exist but must never run: the bad-input tests fail
// before anything starts.
func fakeBinaries(t *testing.T) (bin, pg string) {
	bin, pg = t.TempDir(), t.TempDir()
	for _, n := range []string{"kine", "kube-control-plane", "kube-apiserver", "kube-controller-manager", "kube-scheduler", clusterstack.CloudControllerManagerBinary, "kwok"} {
		os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\nexit 99\n"), 0o755)
	}
	for _, n := range []string{"initdb", "postgres"} {
		os.WriteFile(filepath.Join(pg, n), []byte("#!/bin/sh\nexit 99\n"), 0o755)
	}
	return bin, pg
}

func freePortRange(t *testing.T) portallocator.Range {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return portallocator.Range{First: p, Last: p}
}

func assertNothingLeft(t *testing.T, p *Provider, name string) {
	t.Helper()
	if ls := p.Leases().Leases(); len(ls) != 0 {
		t.Errorf("leases left: %v", ls)
	}
	if _, err := os.Stat(p.DataDir(name)); !os.IsNotExist(err) {
		t.Errorf("DataDir %s exists after a refused bring-up", p.DataDir(name))
	}
	ids, _ := processrunner.FindByMarker(p.DataDir(name)+"/", p.RequiredBinaries())
	if len(ids) != 0 {
		t.Errorf("processes left: %v", ids)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	bin, pg := fakeBinaries(t)
	for _, missing := range []string{"kube-control-plane", clusterstack.CloudControllerManagerBinary} {
		t.Run("missing "+missing, func(t *testing.T) {
			os.Remove(filepath.Join(bin, missing))
			defer os.WriteFile(filepath.Join(bin, missing), []byte("#!/bin/sh\nexit 99\n"), 0o755)
			p, err := New(Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Up(context.Background(), "demo")
			if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), InstallHint) {
				t.Fatalf("Up = %v, want ErrMissingBinary naming %s and %s", err, missing, InstallHint)
			}
			assertNothingLeft(t, p, "demo")
		})
	}
	t.Run("no free port", func(t *testing.T) {
		rng := freePortRange(t)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(rng.First))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		p, err := New(Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: rng})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Up(context.Background(), "demo")
		if !errors.Is(err, portallocator.ErrExhausted) {
			t.Fatalf("Up = %v, want ErrExhausted", err)
		}
		assertNothingLeft(t, p, "demo")
	})
	t.Run("unwritable DataDir", func(t *testing.T) {
		root := t.TempDir()
		p, err := New(Config{DataRoot: root, BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)})
		if err != nil {
			t.Fatal(err)
		}
		// A file where the DataDir must go: even root cannot make a directory there.
		os.WriteFile(p.DataDir("demo"), []byte("not a directory"), 0o600)
		_, err = p.Up(context.Background(), "demo")
		if err == nil || !strings.Contains(err.Error(), "DataDir") {
			t.Fatalf("Up = %v, want an error naming the DataDir", err)
		}
		if ls := p.Leases().Leases(); len(ls) != 0 {
			t.Errorf("leases left: %v", ls)
		}
		if b, _ := os.ReadFile(p.DataDir("demo")); string(b) != "not a directory" {
			t.Error("the refused bring-up changed what was at the DataDir")
		}
	})
	t.Run("data root too long for the sockets", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), strings.Repeat("d", 80))
		p, err := New(Config{DataRoot: root, BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Up(context.Background(), "demo"); err == nil || !strings.Contains(err.Error(), "--data-root") {
			t.Fatalf("Up = %v, want an error naming --data-root", err)
		}
		assertNothingLeft(t, p, "demo")
	})
	t.Run("bad name", func(t *testing.T) {
		p, _ := New(Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)})
		if _, err := p.Up(context.Background(), "Bad_Name"); err == nil || !strings.Contains(err.Error(), "cluster name") {
			t.Fatalf("Up = %v, want an error naming the cluster name", err)
		}
		assertNothingLeft(t, p, "Bad_Name")
	})
}

// The k3s flavour needs k3s, not kube-control-plane, kube-apiserver, kube-controller-manager
// or kube-scheduler, for a tenant; the front still runs kube-apiserver and
// kube-controller-manager. Without it a tenant runs kube-control-plane, and the three are
// needed to adopt what a provider before it started.
func TestTheK3sFlavourNeedsItsOwnBinaries(t *testing.T) {
	bin, pg := fakeBinaries(t)
	plain, _ := New(Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)})
	old := []string{pg + "/initdb", pg + "/postgres", bin + "/kine", bin + "/kube-control-plane", bin + "/" + clusterstack.CloudControllerManagerBinary, bin + "/kwok", bin + "/kube-apiserver", bin + "/kube-controller-manager", bin + "/kube-scheduler"}
	if got := plain.RequiredBinaries(); !slices.Equal(got, old) {
		t.Fatalf("RequiredBinaries = %v, want %v", got, old)
	}
	k3s := filepath.Join(t.TempDir(), "k3s")
	os.WriteFile(k3s, []byte("#!/bin/sh\nexit 99\n"), 0o755)
	p, err := New(Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: freePortRange(t), K3sBinary: k3s})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{pg + "/initdb", pg + "/postgres", bin + "/kine", k3s, bin + "/" + clusterstack.CloudControllerManagerBinary, bin + "/kwok", bin + "/kube-apiserver", bin + "/kube-controller-manager"}
	if got := p.RequiredBinaries(); !slices.Equal(got, want) {
		t.Fatalf("k3s RequiredBinaries = %v, want %v", got, want)
	}
	// A tenant: with the Kubernetes binaries gone, the first missing one it names is kwok,
	// the last of its own (kwok is removed too, so that nothing starts).
	for _, b := range []string{"kube-control-plane", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		os.Remove(filepath.Join(bin, b))
	}
	_, err = p.Up(context.Background(), "demo")
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), bin+"/kwok ") {
		t.Fatalf("k3s Up = %v, want ErrMissingBinary naming %s/kwok and no Kubernetes binary", err, bin)
	}
	assertNothingLeft(t, p, "demo")
	// The front checks every binary the provider runs: kube-apiserver too.
	os.WriteFile(filepath.Join(bin, "kwok"), []byte("#!/bin/sh\nexit 99\n"), 0o755)
	if _, err := p.UpFront(context.Background()); !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), bin+"/kube-apiserver ") {
		t.Fatalf("k3s UpFront = %v, want ErrMissingBinary naming %s/kube-apiserver", err, bin)
	}
}

func TestCredentialsAreMintedOnceAnd0600(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), APIServerPort: 30001}
	os.MkdirAll(s.Layout().PKIDir(), 0o700)
	if err := EnsureCredentials(s, []string{"demo.example", "10.0.0.1"}, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(s.Layout().CACert())
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(s.Layout().CACert())
	if string(ca1) != string(ca2) {
		t.Fatal("a second EnsureCredentials re-minted the CA")
	}
	filepath.Walk(s.DataDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
		}
		return nil
	})
	// The apiserver's client towards kubelets: signed by the cluster CA, for client auth,
	// and in no group (system:masters least of all): RBAC alone grants it the kubelet API.
	ca, err := x509Cert(s.Layout().CACert())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := x509Cert(s.Layout().KubeletClientCert())
	if err != nil {
		t.Fatal(err)
	}
	if kc.Subject.CommonName != KubeletClientUser || len(kc.Subject.Organization) != 0 || kc.CheckSignatureFrom(ca) != nil || !slices.Contains(kc.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Fatalf("kubelet client certificate: CN %q, O %v, usages %v, signed by the CA: %v", kc.Subject.CommonName, kc.Subject.Organization, kc.ExtKeyUsage, kc.CheckSignatureFrom(ca))
	}
	os.Remove(s.Layout().CAKey())
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err == nil {
		t.Fatal("a CA with its key missing was silently re-minted")
	}
}

// A start renews every leaf that is due, by the same CA and with a fresh key, and keeps
// what is not: with a renewal requested (every leaf due), EnsureCredentials renews every
// leaf and kubeconfig, the CAs stay, and the request is gone; without one, under the
// default policy, nothing changes.
func TestCredentialsDueAreRenewedAndTheCAsStay(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), APIServerPort: 30001}
	os.MkdirAll(s.Layout().PKIDir(), 0o700)
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	// Each certificate as it is now (a renewed one has a fresh key, so other bytes).
	read := func() map[string]string {
		certs, err := certrenewal.Inventory(s.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range certs {
			b, _ := os.ReadFile(c.Path)
			if strings.HasSuffix(c.Path, ".kubeconfig") {
				b = certrenewal.KubeconfigCert(b)
			}
			out[filepath.Base(c.Path)] = string(b)
		}
		return out
	}
	before := read()
	if len(before) < 10 {
		t.Fatalf("inventory too small: %v", before)
	}
	if err := certrenewal.Request(s.Layout().RenewRequest(), "the test"); err != nil {
		t.Fatal(err)
	}
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	if certrenewal.Requested(s.Layout().RenewRequest()) {
		t.Error("the renewal request is still there once renewed")
	}
	after := read()
	for name, was := range before {
		now := after[name]
		stays := name == "ca.crt" || name == "front-proxy-ca.crt"
		if stays && now != was {
			t.Errorf("%s changed: a CA is never renewed by a start", name)
		}
		if !stays && now == was {
			t.Errorf("%s was due and was not renewed", name)
		}
	}
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	minted := read()
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	for name, was := range minted {
		if read()[name] != was {
			t.Errorf("%s renewed under the default policy, a year from expiry", name)
		}
	}
}

// secretsOf returns every secret value minted for a cluster: key material, passwords, the
// encryption key. No argv may contain any of them (invariant 3).
func secretsOf(t *testing.T, l clusterstack.Layout) []string {
	t.Helper()
	var out []string
	for _, p := range []string{l.CAKey(), l.FrontProxyCAKey(), l.APIServerKey(), l.FrontProxyClientKey(), l.KubeletClientKey(), l.ServiceAccountKey(), l.PostgresSuperuserPassword()} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pemBody(string(b))...)
	}
	pw, err := kinePassword(l.KinePGPass())
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, pw)
	enc, _ := os.ReadFile(l.EncryptionConfig())
	for _, line := range strings.Split(string(enc), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "secret: "); ok {
			out = append(out, v)
		}
	}
	return out
}

// pemBody returns the base64 lines of PEM blocks (or the text itself when not PEM).
func pemBody(s string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line != "" && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

func TestNoBuilderPutsASecretOnArgv(t *testing.T) {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir(), BinDir: "/opt/bin", APIServerPort: 30001, K3sBinary: "/opt/k3s"}
	os.MkdirAll(s.Layout().PKIDir(), 0o700)
	if err := EnsureCredentials(s, nil, "", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	secrets := secretsOf(t, s.Layout())
	// The CCM's environment too: it carries file paths, never their contents.
	for _, argv := range [][]string{s.InitdbArgv(), s.PostgresArgv(), s.KineArgv(), s.APIServerArgv(), s.ControllerManagerArgv(), s.SchedulerArgv(), s.ServerArgv(), s.CloudControllerManagerArgv(), s.CloudControllerManagerEnv()} {
		joined := strings.Join(argv, " ")
		for _, sec := range secrets {
			if strings.Contains(joined, sec) {
				t.Fatalf("%s carries a secret on argv", argv[0])
			}
		}
		for _, word := range []string{"password=", "token=", ":@"} {
			if strings.Contains(strings.ToLower(joined), word) {
				t.Fatalf("%s argv contains %q", argv[0], word)
			}
		}
	}
}

func x509Cert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

// Minting a cluster created asleep lays out its identity and a tenant kubeconfig naming
// the front door, and nothing else: no port, no datastore, no process. Without a front
// door, nothing would wake it: refused, nothing made.
func TestMintMakesAnIdentityAndNoDatastore(t *testing.T) {
	bin, pg := fakeBinaries(t)
	cfg := Config{DataRoot: t.TempDir(), BinDir: bin, PostgresBin: pg, Ports: freePortRange(t)}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Mint("z"); err == nil || !strings.Contains(err.Error(), "front door") {
		t.Errorf("Mint without a front door = %v, want an error naming the front door", err)
	}
	if _, err := os.Stat(p.DataDir("z")); !os.IsNotExist(err) {
		t.Errorf("a refused Mint left its DataDir (%v)", err)
	}

	cfg.FrontDoor = FrontDoor{Names: frontdoor.Names{BaseDomain: "kcp.test"}, Port: 6443}
	if p, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	m, err := p.Mint("z")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(m.TenantKubeconfig)
	if err != nil || !strings.Contains(string(b), "server: https://z.kcp.test:6443") {
		t.Errorf("tenant kubeconfig (%v) does not name the front door:\n%s", err, b)
	}
	if p.HasDatastore("z") {
		t.Error("minted, yet it has a datastore")
	}
	if len(p.Leases().Leases()) != 0 {
		t.Errorf("minted, yet a port is leased: %v", p.Leases().Leases())
	}
	before, err := os.ReadFile(filepath.Join(p.DataDir("z"), "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Mint("z"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(p.DataDir("z"), "pki", "ca.crt")); !bytes.Equal(before, after) {
		t.Error("a second Mint (a restarted provider's) minted a new CA: every delivered kubeconfig would stop working")
	}
}
