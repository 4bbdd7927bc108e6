package nodejoin

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestTokensHaveTheBootstrapFormatAndDiffer(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	a, _ := NewToken()
	b, _ := NewToken()
	if !re.MatchString(a.String()) || a == b {
		t.Fatalf("tokens %q, %q", a, b)
	}
}

func TestTheTokenSecretAuthenticatesOnlyAndExpires(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	s := TokenSecret(tok, exp, "demo-vm1")
	if s.Name != "bootstrap-token-abcdef" || s.Namespace != "kube-system" || s.Type != corev1.SecretTypeBootstrapToken {
		t.Fatalf("secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	d := s.StringData
	if d["expiration"] != "2026-12-02T18:00:00Z" || d["usage-bootstrap-authentication"] != "true" || d["auth-extra-groups"] != BootstrapGroup {
		t.Fatalf("data %v", d)
	}
	if _, signing := d["usage-bootstrap-signing"]; signing {
		t.Fatal("the token may sign: it should only authenticate")
	}
}

// The user data a guest gets carries the bootstrap token in one place only: the bootstrap
// kubeconfig, written 0600 by root. No command line in it (the kubelet's argv, as its
// environment file gives it, nor any runcmd) carries the token or a --token flag.
func TestTheUserDataKeepsTheTokenOffTheCommandLine(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	kc, err := BootstrapKubeconfig("demo", "https://127.0.0.1:30000", []byte("CA"), tok)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := CloudConfig("demo-vm1", []byte("CA"), kc, map[string]string{"b": "2", "a": "1"})
	if err != nil {
		t.Fatal(err)
	}
	body, ok := strings.CutPrefix(string(ud), "#cloud-config\n")
	if !ok {
		t.Fatal("no #cloud-config header")
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("the user data is not YAML: %v", err)
	}

	// Wherever the secret is in the whole document, it is only in the bootstrap
	// kubeconfig's content, and that file is root's, 0600.
	var holders []string
	walkStrings(doc, "", func(path, v string) {
		if strings.Contains(v, tok.Secret) {
			holders = append(holders, path)
		}
	})
	files, _ := doc["write_files"].([]any)
	tokenFile := -1
	for i, f := range files {
		if f, _ := f.(map[string]any); f["path"] == GuestBootstrapKubeconfigPath {
			tokenFile = i
			if f["permissions"] != "0600" || f["owner"] != "root:root" {
				t.Errorf("the bootstrap kubeconfig is written %v by %v, want 0600 by root:root", f["permissions"], f["owner"])
			}
		}
	}
	if want := fmt.Sprintf("write_files[%d].content", tokenFile); !slices.Equal(holders, []string{want}) {
		t.Errorf("the token is at %v in the user data, want only at %s (the 0600 bootstrap kubeconfig)", holders, want)
	}

	// The kubelet's command line: its environment file's KUBELET_EXTRA_ARGS, split as
	// systemd splits $KUBELET_EXTRA_ARGS on ExecStart.
	var env string
	for _, f := range files {
		if f, _ := f.(map[string]any); f["path"] == GuestKubeletEnvPath {
			env, _ = f["content"].(string)
		}
	}
	argv := kubeletArgv(t, env)
	for _, want := range []string{"--cloud-provider=external", "--bootstrap-kubeconfig=" + GuestBootstrapKubeconfigPath, "--kubeconfig=" + GuestKubeconfigPath, "--hostname-override=demo-vm1", "--node-labels=a=1,b=2"} {
		if !slices.Contains(argv, want) {
			t.Errorf("kubelet argv %q lacks %s", argv, want)
		}
	}
	// Every command line the guest runs: the kubelet's and runcmd's.
	cmdlines := [][]string{argv}
	runcmd, _ := doc["runcmd"].([]any)
	if len(runcmd) == 0 {
		t.Error("no runcmd: nothing starts the kubelet")
	}
	for _, c := range runcmd {
		var line []string
		switch c := c.(type) {
		case string:
			line = strings.Fields(c)
		case []any:
			for _, w := range c {
				line = append(line, fmt.Sprint(w))
			}
		}
		cmdlines = append(cmdlines, line)
	}
	for _, line := range cmdlines {
		for _, w := range line {
			if strings.Contains(w, tok.Secret) || strings.Contains(w, tok.String()) || strings.HasPrefix(w, "--token") {
				t.Errorf("command line %q carries the token (%q)", line, w)
			}
		}
	}
}

// kubeletArgv is the kubelet's extra argv from its environment file: the words of the one
// KUBELET_EXTRA_ARGS="..." line.
func kubeletArgv(t *testing.T, env string) []string {
	t.Helper()
	var argv []string
	n := 0
	for _, line := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(line, "KUBELET_EXTRA_ARGS="); ok {
			n++
			argv = strings.Fields(strings.Trim(v, `"`))
		}
	}
	if n != 1 {
		t.Fatalf("the kubelet environment file %q has %d KUBELET_EXTRA_ARGS lines, want 1", env, n)
	}
	return argv
}

// walkStrings calls f with every string in a decoded YAML document and its path.
func walkStrings(v any, path string, f func(path, v string)) {
	switch v := v.(type) {
	case string:
		f(path, v)
	case map[string]any:
		for k, e := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			f(p+" (key)", k)
			walkStrings(e, p, f)
		}
	case []any:
		for i, e := range v {
			walkStrings(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}
