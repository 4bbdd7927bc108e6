// Package guestboot boots a real guest: it is what runs inside the guest's own mount,
// network, UTS and PID namespaces, as its PID 1. It does what a VM's cloud-init and init
// would do with the #cloud-config user data the provider makes (nodejoin.CloudConfig):
// writes the files the user data lists, then runs what it says (systemctl enable --now
// kubelet), where the "units" are the guest image's containerd, kubelet and kube-proxy,
// supervised by this process. So the user data a VM gets is proven complete here, not
// only parsed.
package guestboot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"socialweb.computer/kcp/internal/atomicfile"
)

// File is one entry of the user data's write_files.
type File struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Content     string `json:"content"`
}

// CloudConfig is the part of #cloud-config a guest honours: write_files and runcmd.
type CloudConfig struct {
	WriteFiles []File     `json:"write_files"`
	Runcmd     [][]string `json:"runcmd"`
}

// Parse reads #cloud-config user data. Anything a guest would not do as the user data
// says is an error naming the field: a relative or unclean path, a mode that is not octal,
// an owner other than root, a command other than starting a unit the guest has.
func Parse(b []byte) (CloudConfig, error) {
	if !bytes.HasPrefix(b, []byte("#cloud-config\n")) {
		return CloudConfig{}, errors.New(`user data: does not start with "#cloud-config"`)
	}
	var c CloudConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return CloudConfig{}, fmt.Errorf("user data: %w", err)
	}
	for i, f := range c.WriteFiles {
		if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path {
			return CloudConfig{}, fmt.Errorf("user data: write_files[%d].path %q: want an absolute, clean path", i, f.Path)
		}
		if _, err := f.mode(); err != nil {
			return CloudConfig{}, fmt.Errorf("user data: write_files[%d].permissions: %w", i, err)
		}
		if f.Owner != "" && f.Owner != "root:root" && f.Owner != "root" {
			return CloudConfig{}, fmt.Errorf("user data: write_files[%d].owner %q: a guest writes files as root only", i, f.Owner)
		}
	}
	for i, cmd := range c.Runcmd {
		if _, err := Units(cmd); err != nil {
			return CloudConfig{}, fmt.Errorf("user data: runcmd[%d]: %w", i, err)
		}
	}
	return c, nil
}

func (f File) mode() (os.FileMode, error) {
	if f.Permissions == "" {
		return 0o644, nil // cloud-init's default
	}
	m, err := strconv.ParseUint(f.Permissions, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("%q: want an octal mode such as 0600", f.Permissions)
	}
	return os.FileMode(m), nil
}

// KnownUnits are the services the guest image has, as systemctl would name them.
var KnownUnits = []string{"containerd", "kubelet", "kube-proxy"}

// Units is what one runcmd entry starts: "systemctl enable --now UNIT..." or "systemctl
// start UNIT...". Anything else is refused: the guest image has no shell to run it in.
func Units(cmd []string) ([]string, error) {
	if len(cmd) < 3 || cmd[0] != "systemctl" {
		return nil, fmt.Errorf("%q: a guest runs only systemctl enable --now UNIT or systemctl start UNIT", strings.Join(cmd, " "))
	}
	rest := cmd[2:]
	switch {
	case cmd[1] == "start":
	case cmd[1] == "enable" && rest[0] == "--now":
		rest = rest[1:]
	default:
		return nil, fmt.Errorf("%q: a guest runs only systemctl enable --now UNIT or systemctl start UNIT", strings.Join(cmd, " "))
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("%q: names no unit", strings.Join(cmd, " "))
	}
	var units []string
	for _, u := range rest {
		u = strings.TrimSuffix(u, ".service")
		if !slices.Contains(KnownUnits, u) {
			return nil, fmt.Errorf("unit %q: the guest has %s", u, strings.Join(KnownUnits, ", "))
		}
		units = append(units, u)
	}
	return units, nil
}

// Write writes every file of c under root ("/" inside the guest's mount namespace; a
// temporary directory in tests), atomically, with its mode.
func (c CloudConfig) Write(root string) error {
	for _, f := range c.WriteFiles {
		mode, _ := f.mode()
		path := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("write_files %s: %w", f.Path, err)
		}
		if err := atomicfile.WriteFile(path, []byte(f.Content), mode); err != nil {
			return fmt.Errorf("write_files %s: %w", f.Path, err)
		}
	}
	return nil
}

// EnvFile reads KEY="value" lines of an environment file such as /etc/default/kubelet, as
// systemd's EnvironmentFile does (one level of double quotes; # comments).
func EnvFile(b []byte) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
	return env
}
