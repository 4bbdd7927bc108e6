package guestboot

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"socialweb.computer/kcp/internal/nodejoin"
)

// The user data the provider makes for a VM is what a guest boots from: every file is
// written with its mode, and the kubelet is the unit it starts.
func TestTheProvidersUserDataBootsAGuest(t *testing.T) {
	tok, _ := nodejoin.NewToken()
	kc, err := nodejoin.BootstrapKubeconfigFor("demo", "https://10.250.0.1:31000", "kubernetes.default.svc", []byte("CA"), tok)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := nodejoin.CloudConfig("demo-n1", []byte("CA"), kc, map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Parse(ud)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := cc.Write(root); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{nodejoin.GuestCAPath: 0o644, nodejoin.GuestBootstrapKubeconfigPath: 0o600, nodejoin.GuestKubeletEnvPath: 0o644} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %o", path, fi, err, mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, nodejoin.GuestBootstrapKubeconfigPath)); !strings.Contains(string(b), "tls-server-name: kubernetes.default.svc") {
		t.Errorf("bootstrap kubeconfig lacks the server name:\n%s", b)
	}
	env, _ := os.ReadFile(filepath.Join(root, nodejoin.GuestKubeletEnvPath))
	if args := EnvFile(env)["KUBELET_EXTRA_ARGS"]; !strings.Contains(args, "--hostname-override=demo-n1") || !strings.Contains(args, "--cloud-provider=external") {
		t.Errorf("KUBELET_EXTRA_ARGS = %q", args)
	}
	var units []string
	for _, cmd := range cc.Runcmd {
		u, err := Units(cmd)
		if err != nil {
			t.Fatal(err)
		}
		units = append(units, u...)
	}
	if strings.Join(units, ",") != "kubelet" {
		t.Errorf("units %v, want kubelet", units)
	}
}

func TestUserDataAGuestWouldNotRun(t *testing.T) {
	for name, ud := range map[string]string{
		"no header":      "write_files: []\n",
		"relative path":  "#cloud-config\nwrite_files:\n- path: etc/x\n  content: x\n",
		"unclean path":   "#cloud-config\nwrite_files:\n- path: /etc/../x\n  content: x\n",
		"bad mode":       "#cloud-config\nwrite_files:\n- path: /etc/x\n  permissions: rw\n  content: x\n",
		"other owner":    "#cloud-config\nwrite_files:\n- path: /etc/x\n  owner: nobody\n  content: x\n",
		"a shell":        "#cloud-config\nruncmd:\n- [sh, -c, id]\n",
		"unknown unit":   "#cloud-config\nruncmd:\n- [systemctl, enable, --now, sshd]\n",
		"unknown field":  "#cloud-config\nbootcmd: [x]\n",
		"stop, no start": "#cloud-config\nruncmd:\n- [systemctl, stop, kubelet]\n",
	} {
		if _, err := Parse([]byte(ud)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEnvFile(t *testing.T) {
	got := EnvFile([]byte("# c\nA=\"x y\"\nB=z\n\nbroken\n"))
	if len(got) != 2 || got["A"] != "x y" || got["B"] != "z" {
		t.Errorf("%v", got)
	}
}

func testConfig() Config {
	return Config{
		Name: "demo-n1", Bin: "/bin", Dir: "/d", UserData: "/d/user-data", Link: "swg0123456789",
		Address: netip.MustParsePrefix("10.250.0.2/24"), Gateway: netip.MustParseAddr("10.250.0.1"),
		PodCIDR: netip.MustParsePrefix("10.244.2.0/24"), ClusterPodCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"), CgroupRoot: "/x/pods", MaxPods: 110,
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Config){
		"no name":           func(c *Config) { c.Name = "" },
		"long link":         func(c *Config) { c.Link = "a-very-long-interface" },
		"gateway elsewhere": func(c *Config) { c.Gateway = netip.MustParseAddr("10.9.9.9") },
		"pods outside":      func(c *Config) { c.PodCIDR = netip.MustParsePrefix("10.9.0.0/24") },
		"no services":       func(c *Config) { c.ServiceCIDR = netip.Prefix{} },
	} {
		c := testConfig()
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The kubelet refuses anonymous requests and asks the apiserver about every other one.
func TestKubeletConfig(t *testing.T) {
	var k map[string]any
	if err := yaml.Unmarshal(KubeletConfig(testConfig(), "/ca.crt", true), &k); err != nil {
		t.Fatal(err)
	}
	auth := k["authentication"].(map[string]any)
	if auth["anonymous"].(map[string]any)["enabled"] != false || auth["webhook"].(map[string]any)["enabled"] != true ||
		k["authorization"].(map[string]any)["mode"] != "Webhook" || k["readOnlyPort"] != float64(0) {
		t.Errorf("kubelet auth: %v %v read-only %v", auth, k["authorization"], k["readOnlyPort"])
	}
	if k["cgroupRoot"] != "/x/pods" || k["podCIDR"] != "10.244.2.0/24" || k["failCgroupV1"] != false || k["address"] != "10.250.0.2" {
		t.Errorf("kubelet config: %v", k)
	}
	var v2 map[string]any
	yaml.Unmarshal(KubeletConfig(testConfig(), "/ca.crt", false), &v2)
	if _, ok := v2["failCgroupV1"]; ok {
		t.Error("failCgroupV1 set on a v2 host")
	}
}

func TestContainerdAndNetworkConfigs(t *testing.T) {
	c := string(ContainerdConfig(PauseImage, false))
	for _, want := range []string{"restrict_oom_score_adj = true", `sandbox = "` + PauseImage + `"`, "SystemdCgroup = false", `BinaryName = "/usr/sbin/runc"`} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
	var cni map[string]any
	if err := yaml.Unmarshal(CNIConfig(netip.MustParsePrefix("10.244.2.0/24")), &cni); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(CNIConfig(netip.MustParsePrefix("10.244.2.0/24"))), `"subnet": "10.244.2.0/24"`) {
		t.Errorf("CNI config: %v", cni)
	}
	var kp map[string]any
	yaml.Unmarshal(KubeProxyConfig(testConfig(), "/k", false), &kp)
	if kp["mode"] != "iptables" || kp["clusterCIDR"] != "10.244.0.0/16" || kp["hostnameOverride"] != "demo-n1" {
		t.Errorf("kube-proxy config: %v", kp)
	}
}
