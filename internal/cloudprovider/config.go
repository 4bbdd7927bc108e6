// Package cloudprovider is socialweb's cloud provider for the cloud controller manager
// (k8s.io/cloud-provider): InstancesV2 only, backed by the instance snapshot the cluster
// provider writes (<DataDir>/nodes.json), re-read on every call. No routes, no load
// balancers, no zones.
package cloudprovider

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

// Defaults of the optional variables.
const (
	DefaultPodsPerNode = 110 // the kubelet's own default for maxPods
	DefaultResync      = 5 * time.Second
	MinResync          = time.Second
	MaxResync          = time.Hour
)

// Config is the CCM's configuration, read from its environment (contract.Env*).
type Config struct {
	Kubeconfig    string
	Cluster       string
	InstancesFile string
	MaxNodes      int // 0: no quota
	PodsPerNode   int
	Resync        time.Duration
}

// ParseEnv reads the configuration through getenv (os.Getenv in main). Every error names
// the variable and says what it wants.
func ParseEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Kubeconfig:    getenv(contract.EnvTenantKubeconfig),
		Cluster:       getenv(contract.EnvCluster),
		InstancesFile: getenv(contract.EnvInstancesFile),
		PodsPerNode:   DefaultPodsPerNode,
		Resync:        DefaultResync,
	}
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, a...)...))
	}
	for _, v := range []struct{ name, val string }{
		{contract.EnvTenantKubeconfig, c.Kubeconfig}, {contract.EnvInstancesFile, c.InstancesFile},
	} {
		if v.val == "" {
			bad(v.name, "is not set; want an absolute file path")
		} else if !filepath.IsAbs(v.val) {
			bad(v.name, "%q is not an absolute path", v.val)
		}
	}
	if c.Cluster == "" {
		bad(contract.EnvCluster, "is not set; want the tenant cluster's name")
	} else if msgs := validation.IsDNS1123Label(c.Cluster); len(msgs) > 0 {
		bad(contract.EnvCluster, "%q is not a DNS-1123 label: %s", c.Cluster, msgs[0])
	}
	if c.Kubeconfig != "" {
		if err := RefuseAdminByName(c.Kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", contract.EnvTenantKubeconfig, err))
		}
	}
	intVar := func(name string, dst *int, min int) {
		s := getenv(name)
		if s == "" {
			return
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < min {
			bad(name, "%q is not a whole number of at least %d", s, min)
			return
		}
		*dst = n
	}
	intVar(contract.EnvMaxNodes, &c.MaxNodes, 0)
	intVar(contract.EnvPodsPerNode, &c.PodsPerNode, 1)
	if s := getenv(contract.EnvResync); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < MinResync || d > MaxResync {
			bad(contract.EnvResync, "%q is not a duration from %s to %s (for example 10s)", s, MinResync, MaxResync)
		} else {
			c.Resync = d
		}
	}
	return c, errors.Join(errs...)
}

// adminKubeconfigNames are the files that hold an admin credential by convention: ours and
// k3s's. The CCM refuses them by name before it connects (invariant 20).
var adminKubeconfigNames = map[string]bool{"admin.kubeconfig": true, "k3s.yaml": true}

// RefuseAdminByName refuses a kubeconfig whose file name is an admin credential's.
func RefuseAdminByName(path string) error {
	if adminKubeconfigNames[filepath.Base(path)] {
		return fmt.Errorf("%w: %s is an admin kubeconfig by its name; the cloud controller manager runs only with its own scoped credential (cloud-controller-manager.kubeconfig)", ErrAdminCredential, path)
	}
	return nil
}
