package clusterstack

import (
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
		"etcd-servers": "unix:///var/lib/socialweb-kcp/clusters/demo/run/kine.sock",
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
	if got, _ := flag(kine, "listen-address"); got != "unix:///var/lib/socialweb-kcp/clusters/demo/run/kine.sock" {
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

func TestArgvIsDeterministic(t *testing.T) {
	a, b := spec().APIServerArgv(), spec().APIServerArgv()
	if !slices.Equal(a, b) {
		t.Fatal("two builds of the same spec differ")
	}
	if !slices.IsSorted(a[1:]) {
		t.Fatal("flags are not sorted")
	}
}

func TestEveryPathIsUnderTheDataDir(t *testing.T) {
	s := spec()
	withEnv := func(argv []string, env []string) []string { return append(append([]string{}, argv...), env...) }
	for _, argv := range [][]string{s.InitdbArgv(), s.PostgresArgv(), withEnv(s.KineArgv(), s.KineEnv()), s.APIServerArgv(), s.ControllerManagerArgv(), s.SchedulerArgv(), withEnv(s.CloudControllerManagerArgv(), s.CloudControllerManagerEnv())} {
		for _, a := range argv[1:] {
			_, v, _ := strings.Cut(a, "=")
			if strings.HasPrefix(v, "/") && !strings.HasPrefix(v, s.DataDir+"/") {
				t.Errorf("%s: %s is outside the DataDir", argv[0], a)
			}
		}
	}
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
