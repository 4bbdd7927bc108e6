package clusterstack

import (
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/procgroup"
)

func spec() Spec {
	return Spec{Name: "demo", DataDir: "/var/lib/socialweb-kcp/clusters/demo", BinDir: "/opt/bin", APIServerPort: 30001}
}

func flag(argv []string, name string) (string, bool) {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestOnlyTheAPIServerHoldsATCPPort(t *testing.T) {
	s := spec()
	api := s.APIServerArgv()
	for name, want := range map[string]string{
		"secure-port":  "30001",
		"bind-address": "127.0.0.1",
		"etcd-servers": "unix:///var/lib/socialweb-kcp/clusters/demo/sock/kine.sock",
	} {
		if got, _ := flag(api, name); got != want {
			t.Errorf("apiserver --%s=%q, want %q", name, got, want)
		}
	}
	for _, argv := range [][]string{s.ControllerManagerArgv(), s.SchedulerArgv()} {
		if got, _ := flag(argv, "secure-port"); got != "0" {
			t.Errorf("%s --secure-port=%q, want 0 (listen on nothing)", argv[0], got)
		}
	}
	kine := s.KineArgv()
	if got, _ := flag(kine, "listen-address"); got != "unix:///var/lib/socialweb-kcp/clusters/demo/sock/kine.sock" {
		t.Errorf("kine listens on %q, want its unix socket", got)
	}
	if got, _ := flag(kine, "metrics-bind-address"); got != "0" {
		t.Errorf("kine metrics listener %q, want 0 (off)", got)
	}
	if ep, _ := flag(kine, "endpoint"); !strings.Contains(ep, "host=%2Fvar%2Flib%2Fsocialweb-kcp%2Fclusters%2Fdemo%2Fpostgres%2Frun") || strings.Contains(ep, ":@") {
		t.Errorf("kine endpoint %q: want Postgres over its socket, no password", ep)
	}
	pg := strings.Join(s.PostgresArgv(), " ")
	if !strings.Contains(pg, "-c listen_addresses= ") || !strings.Contains(pg, "unix_socket_directories=/var/lib/socialweb-kcp/clusters/demo/postgres/run") {
		t.Errorf("postgres argv %q: want no TCP listener and its socket in the DataDir", pg)
	}
}

// A tenant's apiserver dials its kubelets by InternalIP (a guest's name resolves nowhere
// here) with its own client certificate from the DataDir; the front, with no kubelets, has
// neither.
func TestTheAPIServerReachesKubeletsByAddressWithItsOwnCertificate(t *testing.T) {
	s := spec()
	api := s.APIServerArgv()
	for name, want := range map[string]string{
		"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
		"kubelet-client-certificate":      s.Layout().KubeletClientCert(),
		"kubelet-client-key":              s.Layout().KubeletClientKey(),
	} {
		if got, _ := flag(api, name); got != want {
			t.Errorf("apiserver --%s=%q, want %q", name, got, want)
		}
	}
	front := Spec{Name: "front", DataDir: "/var/lib/socialweb-kcp/front", BinDir: "/opt/bin", APIServerPort: 30000, Front: true}
	for _, a := range front.APIServerArgv() {
		if strings.HasPrefix(a, "--kubelet-") {
			t.Errorf("the front's apiserver has %s; it has no kubelets", a)
		}
	}
}

func TestArgvIsDeterministic(t *testing.T) {
	a, b := spec().APIServerArgv(), spec().APIServerArgv()
	if !slices.Equal(a, b) {
		t.Fatal("two builds of the same spec differ")
	}
	if !slices.IsSorted(a[1:]) {
		t.Fatal("flags are not sorted")
	}
}

// Every absolute path on every component's argv (and in the environments that carry
// paths) is under the cluster's DataDir (invariant 6); only the binaries themselves
// (argv[0]) and BinDir are elsewhere. Each flavour: the tenant stack, the front, k3s.
func TestEveryPathIsUnderTheDataDir(t *testing.T) {
	front := spec()
	front.Front = true
	k3s := spec()
	k3s.K3sBinary = "/usr/local/bin/k3s"
	for _, s := range []Spec{spec(), front, k3s} {
		for name, argv := range commandLines(t, s) {
			paths := absolutePaths(argv)
			if len(paths) == 0 {
				t.Errorf("%s: no path found in %q: the helper no longer sees them", name, argv)
			}
			for _, p := range outside(s, paths) {
				t.Errorf("%s (front %v, k3s %q): %s is outside the DataDir %s", name, s.Front, s.K3sBinary, p, s.DataDir)
			}
		}
	}
}

// The check itself: each form a path takes on argv is found, and one outside the DataDir
// is reported.
func TestAbsolutePathsFindsEveryForm(t *testing.T) {
	s := spec()
	argv := []string{"/opt/bin/x",
		"--kubeconfig=/etc/kubeconfig",                       // --k=/abs
		"--etcd-servers=unix:///run/kine.sock",               // a unix:// endpoint
		"--endpoint=sqlite:///tmp/state.db?_journal=WAL",     // a sqlite:// endpoint, its query cut
		"--endpoint=postgres://kine@/kine?host=%2Fvar%2Frun", // a DSN's socket directory
		"-D", "/srv/pgdata", // a flag and its path apart
		"-c", "unix_socket_directories=/tmp", // -c key=/abs
		"PGPASSFILE=/root/.pgpass",                  // an environment entry
		"--data-dir=" + s.DataDir + "/../../escape", // under the DataDir in name only
		"--config=" + s.DataDir + "/kwok.yaml",      // fine: the DataDir
		"--bin=" + s.BinDir + "/kine",               // fine: BinDir
		"--selector=kwok.x-k8s.io/node=fake",        // no path
		"-c", "listen_addresses=",                   // no path
	}
	want := []string{"/etc/kubeconfig", "/run/kine.sock", "/tmp/state.db", "/var/run", "/srv/pgdata", "/tmp", "/root/.pgpass", s.DataDir + "/../../escape"}
	got := outside(s, absolutePaths(argv))
	if !slices.Equal(got, want) {
		t.Errorf("outside the DataDir: %q\nwant %q", got, want)
	}
}

// commandLines is every command line of s's stack by component, each followed by the
// environment it is given (the environments carry paths too).
func commandLines(t *testing.T, s Spec) map[string][]string {
	t.Helper()
	out := map[string][]string{"initdb": s.InitdbArgv()}
	comps := append([]procgroup.Component{procgroup.ComponentPostgres, procgroup.ComponentKine}, s.ControlPlane()...)
	comps = append(comps, procgroup.ComponentCloudControllerManager, procgroup.ComponentKwok)
	for _, c := range comps {
		argv, err := s.Argv(c)
		if err != nil {
			t.Fatal(err)
		}
		switch c {
		case procgroup.ComponentKine:
			argv = append(argv, s.KineEnv()...)
		case procgroup.ComponentCloudControllerManager:
			argv = append(argv, s.CloudControllerManagerEnv()...)
		}
		out[c.String()] = argv
	}
	return out
}

// absolutePaths is every absolute path on argv after argv[0]: a bare item ("-D /p"), a
// flag's or an environment entry's value ("--k=/p", "K=/p", "-c key=/p"), the path of a
// unix:// or sqlite:// endpoint, and a URL's query values (a DSN's host=/socket/dir).
func absolutePaths(argv []string) []string {
	var out []string
	for _, a := range argv[1:] {
		out = append(out, pathsIn(a)...)
	}
	return out
}

func pathsIn(v string) []string {
	if strings.HasPrefix(v, "/") {
		return []string{v}
	}
	if i := strings.Index(v, "="); i >= 0 && !strings.ContainsAny(v[:i], "/:?") {
		return pathsIn(v[i+1:]) // --k=v, K=v, key=v
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return nil
	}
	var out []string
	if scheme == "unix" || scheme == "sqlite" {
		p, _, _ := strings.Cut(rest, "?")
		out = append(out, pathsIn(p)...)
	}
	if u, err := url.Parse(v); err == nil {
		for _, vals := range u.Query() {
			for _, q := range vals {
				out = append(out, pathsIn(q)...)
			}
		}
	}
	return out
}

// outside is the paths that are neither in s's DataDir nor in its BinDir, once cleaned of "..".
func outside(s Spec, paths []string) []string {
	in := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	var out []string
	for _, p := range paths {
		if c := filepath.Clean(p); !in(c, s.DataDir) && !in(c, s.BinDir) {
			out = append(out, p)
		}
	}
	return out
}

func TestK3sFlavour(t *testing.T) {
	s := spec()
	s.K3sBinary = "/usr/local/bin/k3s"
	if got := s.ControlPlane(); !slices.Equal(got, []procgroup.Component{procgroup.ComponentK3s}) {
		t.Fatalf("k3s control plane = %v", got)
	}
	argv, err := s.Argv(procgroup.ComponentK3s)
	if err != nil {
		t.Fatal(err)
	}
	if argv[0] != "/usr/local/bin/k3s" || argv[1] != "server" {
		t.Fatalf("argv = %v", argv)
	}
	for _, f := range []string{"disable-agent", "disable-cloud-controller", "datastore-endpoint", "https-listen-port"} {
		if _, ok := flag(argv, f); !ok {
			t.Errorf("k3s server lacks --%s", f)
		}
	}
	if v, _ := flag(argv, "datastore-endpoint"); v != "unix://"+s.Layout().KineSocket() {
		t.Errorf("k3s datastore %q, want the cluster's kine", v)
	}
}

func TestArgvDispatch(t *testing.T) {
	s := spec()
	for _, c := range []procgroup.Component{procgroup.ComponentPostgres, procgroup.ComponentKine, procgroup.ComponentAPIServer, procgroup.ComponentControllerManager, procgroup.ComponentScheduler, procgroup.ComponentCloudControllerManager} {
		argv, err := s.Argv(c)
		if err != nil || len(argv) == 0 {
			t.Errorf("Argv(%s) = %v, %v", c, argv, err)
		}
	}
	if _, err := s.Argv(procgroup.ComponentOpenBao); err == nil {
		t.Error("Argv(openbao) has no builder and must say so")
	}
}

// The CCM's argv is the binary alone; its configuration is its environment (seed 0003).
func TestTheCCMIsConfiguredByItsEnvironmentOnly(t *testing.T) {
	s := spec()
	if argv := s.CloudControllerManagerArgv(); !slices.Equal(argv, []string{"/opt/bin/socialweb-cloud-controller-manager"}) {
		t.Fatalf("CCM argv %v, want the binary alone", argv)
	}
	want := []string{
		"SOCIALWEB_CLOUDCONTROLLERMANAGER_TENANT_KUBECONFIG=/var/lib/socialweb-kcp/clusters/demo/cloud-controller-manager.kubeconfig",
		"SOCIALWEB_CLOUDCONTROLLERMANAGER_CLUSTER=demo",
		"SOCIALWEB_CLOUDCONTROLLERMANAGER_INSTANCES_FILE=/var/lib/socialweb-kcp/clusters/demo/nodes.json",
	}
	if got := s.CloudControllerManagerEnv(); !slices.Equal(got, want) {
		t.Fatalf("CCM env %v, want %v", got, want)
	}
	s.MaxNodes, s.PodsPerNode, s.NodeResync = 5, 20, 2*time.Second
	got := s.CloudControllerManagerEnv()
	for _, kv := range []string{"SOCIALWEB_CLOUDCONTROLLERMANAGER_MAX_NODES=5", "SOCIALWEB_CLOUDCONTROLLERMANAGER_PODS_PER_NODE=20", "SOCIALWEB_CLOUDCONTROLLERMANAGER_RESYNC=2s"} {
		if !slices.Contains(got, kv) {
			t.Errorf("CCM env %v lacks %s", got, kv)
		}
	}
}

func TestTheBindAndAdvertiseAddresses(t *testing.T) {
	for _, tc := range []struct {
		bind, advertise            string
		wantBind, wantAdv, wantURL string
	}{
		{"", "", "127.0.0.1", "127.0.0.1", "https://127.0.0.1:30001"},
		{"0.0.0.0", "", "0.0.0.0", "127.0.0.1", "https://127.0.0.1:30001"},
		{"0.0.0.0", "192.0.2.10", "0.0.0.0", "192.0.2.10", "https://127.0.0.1:30001"},
		{"192.0.2.10", "", "192.0.2.10", "192.0.2.10", "https://192.0.2.10:30001"},
		{"::", "", "::", "127.0.0.1", "https://127.0.0.1:30001"},
		{"2001:db8::1", "", "2001:db8::1", "2001:db8::1", "https://[2001:db8::1]:30001"},
	} {
		s := spec()
		s.BindAddress, s.AdvertiseAddress = tc.bind, tc.advertise
		for _, argv := range [][]string{s.APIServerArgv(), func() []string { s.K3sBinary = "/opt/k3s"; return s.ServerArgv() }()} {
			b, _ := flag(argv, "bind-address")
			a, _ := flag(argv, "advertise-address")
			if b != tc.wantBind || a != tc.wantAdv {
				t.Errorf("bind %q advertise %q: %s has --bind-address=%s --advertise-address=%s, want %s and %s", tc.bind, tc.advertise, argv[0], b, a, tc.wantBind, tc.wantAdv)
			}
		}
		if got := s.URL(); got != tc.wantURL {
			t.Errorf("bind %q: URL %s, want %s", tc.bind, got, tc.wantURL)
		}
		if got, want := s.AdvertisedURL(), "https://"+net.JoinHostPort(tc.wantAdv, "30001"); got != want {
			t.Errorf("bind %q advertise %q: AdvertisedURL %s, want %s", tc.bind, tc.advertise, got, want)
		}
	}
}

// The tenant apiserver writes an audit log under the DataDir's logs, bounded; the
// front's, the operator's, has none.
func TestOnlyTenantApiserversAudit(t *testing.T) {
	s := Spec{Name: "demo", DataDir: "/data/demo", BinDir: "/bin", APIServerPort: 30001}
	argv := s.APIServerArgv()
	for _, want := range []string{"--audit-policy-file=/data/demo/audit-policy.yaml", "--audit-log-path=/data/demo/audit/audit.log", "--audit-log-maxsize=10", "--audit-log-maxbackup=2"} {
		if !slices.Contains(argv, want) {
			t.Errorf("tenant apiserver argv lacks %s", want)
		}
	}
	s.Front = true
	if slices.ContainsFunc(s.APIServerArgv(), func(a string) bool { return strings.HasPrefix(a, "--audit-") }) {
		t.Error("the front's apiserver audits")
	}
}

// A tenant's components read only ComponentFiles and write only under ComponentDirs (and
// kine's socket): every path of theirs is one of those, so that the cluster's user owns
// exactly what its components need, and a new flag naming another file fails here first.
func TestComponentsReachOnlyTheirOwnFiles(t *testing.T) {
	s := spec()
	l := s.Layout()
	for name, argv := range commandLines(t, s) {
		if strings.HasPrefix(name, "initdb") {
			continue // initdb reads its password copy, under PostgresDir
		}
		for _, p := range absolutePaths(argv) {
			under := slices.ContainsFunc(l.ComponentDirs(), func(d string) bool { return strings.HasPrefix(p, d+"/") || p == d })
			if !strings.HasPrefix(p, s.BinDir+"/") && !slices.Contains(l.ComponentFiles(), p) && !under && p != l.KineSocket() && p != s.DataDir {
				t.Errorf("%s reaches %s: not a component file, nor under a component directory", name, p)
			}
		}
	}
}

// A tenant apiserver admits no privileged container (a real guest's would be root on the
// host) and enforces PodSecurity baseline by default.
func TestTenantApiserversAdmitNoPrivilegedPod(t *testing.T) {
	s := Spec{Name: "demo", DataDir: "/data/demo", BinDir: "/bin", APIServerPort: 30001}
	argv := s.APIServerArgv()
	for _, want := range []string{"--allow-privileged=false", "--admission-control-config-file=/data/demo/admission.yaml"} {
		if !slices.Contains(argv, want) {
			t.Errorf("tenant apiserver argv lacks %s", want)
		}
	}
	if !strings.Contains(AdmissionConfig, "enforce: baseline") {
		t.Errorf("admission config enforces no baseline:\n%s", AdmissionConfig)
	}
}

// A tenant's control plane is one process, kube-control-plane, carrying each component's
// own flags in its own section (so each its own kubeconfig, its own identity); the three
// processes remain for the front and for a group an earlier provider started.
func TestTheControlPlaneIsOneProcessOfTheThreesFlags(t *testing.T) {
	s := spec()
	if got := s.ControlPlane(); !slices.Equal(got, []procgroup.Component{procgroup.ComponentControlPlane}) {
		t.Fatalf("ControlPlane = %v, want kube-control-plane alone", got)
	}
	split := spec()
	split.SplitControlPlane = true
	if got := split.ControlPlane(); !slices.Equal(got, []procgroup.Component{procgroup.ComponentAPIServer, procgroup.ComponentControllerManager, procgroup.ComponentScheduler}) {
		t.Fatalf("split ControlPlane = %v, want the three", got)
	}
	front := spec()
	front.Front = true
	if got := front.ControlPlane(); !slices.Equal(got, []procgroup.Component{procgroup.ComponentAPIServer, procgroup.ComponentControllerManager}) {
		t.Fatalf("front ControlPlane = %v, want its apiserver and controller-manager", got)
	}

	argv, err := s.Argv(procgroup.ComponentControlPlane)
	if err != nil || argv[0] != "/opt/bin/kube-control-plane" {
		t.Fatalf("Argv = %v, %v", argv, err)
	}
	sections := map[string][]string{}
	var cur string
	var order []string
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "--") {
			cur = a
			order = append(order, a)
			continue
		}
		sections[cur] = append(sections[cur], a)
	}
	if !slices.Equal(order, []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}) {
		t.Fatalf("sections %v", order)
	}
	for name, own := range map[string][]string{"kube-apiserver": s.APIServerArgv(), "kube-controller-manager": s.ControllerManagerArgv(), "kube-scheduler": s.SchedulerArgv()} {
		if !slices.Equal(sections[name], own[1:]) {
			t.Errorf("section %s = %v, want the component's own flags %v", name, sections[name], own[1:])
		}
	}
	l := s.Layout()
	if v, _ := flag(sections["kube-controller-manager"], "kubeconfig"); v != l.ControllerManagerKubeconfig() {
		t.Errorf("controller-manager kubeconfig %q, want its own", v)
	}
	if v, _ := flag(sections["kube-scheduler"], "kubeconfig"); v != l.SchedulerKubeconfig() {
		t.Errorf("scheduler kubeconfig %q, want its own", v)
	}
}

func TestTheGoRuntimeSettings(t *testing.T) {
	s := spec()
	for c, want := range map[procgroup.Component][]string{
		procgroup.ComponentControlPlane: {"GOGC=50", "KUBE_CONTROL_PLANE_IDLE_GOGC=25"},
		procgroup.ComponentAPIServer:    {"GOGC=50"},
		procgroup.ComponentKine:         nil,
	} {
		if got := s.RuntimeEnv(c); !slices.Equal(got, want) {
			t.Errorf("RuntimeEnv(%s) = %v, want %v", c, got, want)
		}
	}
	front := spec()
	front.Front = true
	for _, c := range []procgroup.Component{procgroup.ComponentAPIServer, procgroup.ComponentControlPlane} {
		if got := front.RuntimeEnv(c); got != nil {
			t.Errorf("the front's %s: %v, want the defaults", c, got)
		}
	}
}

// A tenant's one-process control plane leaves out the idle work nobody in a tenant reads
// (the object counts, the identity and peer leases, a vacuum check every minute); the split
// layout keeps exactly its old flags, so that a group an earlier provider started is
// adopted as it runs, and the front keeps upstream's defaults.
func TestAnIdleTenantControlPlaneDoesNoWorkForNobody(t *testing.T) {
	trims := map[string]string{
		"etcd-count-metric-poll-period": "0",
		"feature-gates":                 "APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false,ConcurrentWatchObjectDecode=false",
	}
	s := spec()
	split := spec()
	split.SplitControlPlane = true
	front := spec()
	front.Front = true
	for name, want := range trims {
		if got, _ := flag(s.APIServerArgv(), name); got != want {
			t.Errorf("tenant apiserver --%s=%q, want %q", name, got, want)
		}
		for what, other := range map[string]Spec{"split": split, "front": front} {
			if got, ok := flag(other.APIServerArgv(), name); ok {
				t.Errorf("%s apiserver has --%s=%s, want upstream's default", what, name, got)
			}
		}
	}
	if got, _ := flag(s.KineArgv(), "datastore-poll-interval"); got != "10s" {
		t.Errorf("tenant kine --datastore-poll-interval=%q, want 10s: it is its table's only writer", got)
	}
	if got, _ := flag(s.KineArgv(), "watch-progress-notify-interval"); got != "10m0s" {
		t.Errorf("tenant kine --watch-progress-notify-interval=%q, want 10m0s: no watch of a tenant's asks for progress", got)
	}
	if got, ok := flag(front.KineArgv(), "watch-progress-notify-interval"); ok {
		t.Errorf("the front's kine has --watch-progress-notify-interval=%s, want kine's default: the front's watch cache asks for progress", got)
	}
	for _, name := range []string{"datastore-poll-interval", "watch-progress-notify-interval"} {
		if got, ok := flag(split.KineArgv(), name); ok {
			t.Errorf("split layout's kine has --%s=%s, want the argv it was started with", name, got)
		}
	}
	pgTrims := []string{"autovacuum_naptime=5min", "max_logical_replication_workers=0"}
	for _, setting := range pgTrims {
		if !slices.Contains(s.PostgresArgv(), setting) {
			t.Errorf("tenant postgres argv %v lacks -c %s", s.PostgresArgv(), setting)
		}
		if slices.Contains(split.PostgresArgv(), setting) {
			t.Errorf("split layout's postgres has -c %s, want the argv it was started with", setting)
		}
	}
}
