package cloudprovider

import (
	"errors"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func good() map[string]string {
	return map[string]string{
		contract.EnvTenantKubeconfig: "/var/lib/socialweb-kcp/clusters/demo/cloud-controller-manager.kubeconfig",
		contract.EnvCluster:          "demo",
		contract.EnvInstancesFile:    "/var/lib/socialweb-kcp/clusters/demo/nodes.json",
	}
}

func TestParseEnvDefaults(t *testing.T) {
	c, err := ParseEnv(env(good()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster != "demo" || c.MaxNodes != 0 || c.PodsPerNode != DefaultPodsPerNode || c.Resync != DefaultResync {
		t.Fatalf("config %+v", c)
	}
	m := good()
	m[contract.EnvMaxNodes], m[contract.EnvPodsPerNode], m[contract.EnvResync] = "3", "20", "1m"
	c, err = ParseEnv(env(m))
	if err != nil || c.MaxNodes != 3 || c.PodsPerNode != 20 || c.Resync != time.Minute {
		t.Fatalf("config %+v, %v", c, err)
	}
}

// Every bad value is an error that names its variable.
func TestParseEnvRejectsEveryBadValue(t *testing.T) {
	cases := []struct{ key, val string }{
		{contract.EnvTenantKubeconfig, ""},
		{contract.EnvTenantKubeconfig, "relative/cloud-controller-manager.kubeconfig"},
		{contract.EnvTenantKubeconfig, "/var/lib/x/admin.kubeconfig"},
		{contract.EnvTenantKubeconfig, "/etc/rancher/k3s/k3s.yaml"},
		{contract.EnvCluster, ""},
		{contract.EnvCluster, "Demo"},
		{contract.EnvCluster, "de_mo"},
		{contract.EnvCluster, strings.Repeat("a", 64)},
		{contract.EnvInstancesFile, ""},
		{contract.EnvInstancesFile, "nodes.json"},
		{contract.EnvMaxNodes, "many"},
		{contract.EnvMaxNodes, "-1"},
		{contract.EnvMaxNodes, "2.5"},
		{contract.EnvPodsPerNode, "0"},
		{contract.EnvPodsPerNode, "lots"},
		{contract.EnvResync, "5"},
		{contract.EnvResync, "10ms"},
		{contract.EnvResync, "2h"},
		{contract.EnvResync, "soon"},
	}
	for _, c := range cases {
		m := good()
		m[c.key] = c.val
		_, err := ParseEnv(env(m))
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s=%q: %v, want an error naming %s", c.key, c.val, err, c.key)
		}
	}
}

func TestTheAdminKubeconfigIsRefusedByName(t *testing.T) {
	for _, p := range []string{"/d/admin.kubeconfig", "/etc/rancher/k3s/k3s.yaml"} {
		if err := RefuseAdminByName(p); !errors.Is(err, ErrAdminCredential) {
			t.Errorf("RefuseAdminByName(%s) = %v", p, err)
		}
	}
	if err := RefuseAdminByName("/d/cloud-controller-manager.kubeconfig"); err != nil {
		t.Fatal(err)
	}
}

func TestFlagsListenOnNothingAndElectNoLeader(t *testing.T) {
	c, _ := ParseEnv(env(good()))
	f := strings.Join(Flags(c), " ")
	for _, want := range []string{"--secure-port=0", "--webhook-secure-port=0", "--leader-elect=false", "--cloud-provider=socialweb", "--kubeconfig=" + c.Kubeconfig, "--node-monitor-period=5s"} {
		if !strings.Contains(f, want) {
			t.Errorf("flags %q lack %q", f, want)
		}
	}
}
