// Package clusterstack describes a tenant cluster's stack as data: where each file lives
// under the cluster's DataDir and the argv of each component. It starts nothing; argv is
// tested as data. No builder puts a secret on argv (invariant 3): passwords and keys are
// named by file path, never by value.
package clusterstack

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"socialweb.computer/kcp/internal/procgroup"
)

// Spec is one tenant cluster's stack.
type Spec struct {
	Name          string // the cluster's name, a DNS-1123 label
	DataDir       string // everything of the cluster lives below it (invariant 6)
	BinDir        string // kine, kube-control-plane, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
	PostgresBin   string // initdb and postgres
	APIServerPort int    // the one TCP port of the stack, under a lease
	// BindAddress is the IP the apiserver listens on ("" is 127.0.0.1), and
	// AdvertiseAddress the one it publishes to its cluster ("" is the bind address, or
	// 127.0.0.1 when that is 0.0.0.0 or ::). Beyond loopback, the apiserver's port is
	// open to whatever reaches that address, not only through the front door.
	BindAddress, AdvertiseAddress string
	ServiceCIDR                   string // the tenant's service range; "" means DefaultServiceCIDR
	// K3sBinary, when set, selects the k3s flavour of the control plane.
	K3sBinary string
	// SplitControlPlane runs a tenant's control plane as three processes (kube-apiserver,
	// kube-controller-manager, kube-scheduler) instead of one (kube-control-plane): the
	// layout of providers before the one process, kept only to adopt a group one of them
	// started, as it runs. Its next bring-up is one process.
	SplitControlPlane bool
	// Front makes this the provider's own management API server: kine on SQLite (no
	// Postgres), kube-apiserver, and a controller-manager for namespaces and garbage
	// collection; no scheduler, no CCM.
	Front bool
	// The cloud controller manager's node policy; zero values take the CCM's defaults.
	MaxNodes    int           // at most this many Nodes are initialized; 0 is no quota
	PodsPerNode int           // published on each Node the CCM initializes
	NodeResync  time.Duration // how often Nodes are re-checked against nodes.json
	// CompactionInterval is how often the apiserver compacts the datastore's history
	// (0: DefaultCompactionInterval).
	CompactionInterval time.Duration
	// External, when set, is the cluster's datastore on an external PostgreSQL server:
	// no Postgres process of its own, kine dials the server over TLS as the tenant's role.
	External *External
}

// External is a tenant's database on an external PostgreSQL server (internal/externaldb).
type External struct {
	Host           string
	Port           int
	Database, Role string
	// Epoch is the Cluster's binding epoch at this bring-up: the datastore is taken at it,
	// and refuses a take of an older one (externaldb.Server.Take).
	Epoch int64
}

// DefaultServiceCIDR is the tenant clusters' service range. It is a setting inside each
// tenant apiserver, not routed on the host, so every tenant may use the same one.
const DefaultServiceCIDR = "10.96.0.0/16"

// DefaultPostgresBin is where Debian's postgresql-15 package puts its binaries.
const DefaultPostgresBin = "/usr/lib/postgresql/15/bin"

// Datastore names: the database kine uses and the role it logs in as.
const (
	KineDatabase = "kine"
	KineRole     = "kine"
	// PostgresSuperuser is the bootstrap superuser initdb creates; only the provider uses it.
	PostgresSuperuser = "postgres"
	// PostgresUser is the OS user Postgres runs as; initdb refuses root.
	PostgresUser = "postgres"
)

// ControlPlane returns the control-plane components of this stack (its flavour), in start order.
func (s Spec) ControlPlane() []procgroup.Component {
	if s.Front {
		return []procgroup.Component{procgroup.ComponentAPIServer, procgroup.ComponentControllerManager}
	}
	if s.K3sBinary != "" {
		return []procgroup.Component{procgroup.ComponentK3s}
	}
	if s.SplitControlPlane {
		return []procgroup.Component{procgroup.ComponentAPIServer, procgroup.ComponentControllerManager, procgroup.ComponentScheduler}
	}
	return []procgroup.Component{procgroup.ComponentControlPlane}
}

// Argv dispatches to the component's builder.
func (s Spec) Argv(c procgroup.Component) ([]string, error) {
	switch c {
	case procgroup.ComponentPostgres:
		return s.PostgresArgv(), nil
	case procgroup.ComponentKine:
		return s.KineArgv(), nil
	case procgroup.ComponentK3s:
		return s.ServerArgv(), nil
	case procgroup.ComponentControlPlane:
		return s.ControlPlaneArgv(), nil
	case procgroup.ComponentAPIServer:
		return s.APIServerArgv(), nil
	case procgroup.ComponentControllerManager:
		return s.ControllerManagerArgv(), nil
	case procgroup.ComponentScheduler:
		return s.SchedulerArgv(), nil
	case procgroup.ComponentCloudControllerManager:
		return s.CloudControllerManagerArgv(), nil
	case procgroup.ComponentKwok:
		return s.KwokArgv(), nil
	}
	return nil, fmt.Errorf("clusterstack: no argv builder for %s", c)
}

// Bin is the path of a binary in BinDir.
func (s Spec) Bin(name string) string { return filepath.Join(s.BinDir, name) }

func (s Spec) postgresBin(name string) string {
	dir := s.PostgresBin
	if dir == "" {
		dir = DefaultPostgresBin
	}
	return filepath.Join(dir, name)
}

func (s Spec) serviceCIDR() string {
	if s.ServiceCIDR == "" {
		return DefaultServiceCIDR
	}
	return s.ServiceCIDR
}

// URL is the tenant apiserver's address as the provider's own clients dial it: on its
// bind address, or on loopback when it listens on every address.
func (s Spec) URL() string {
	return "https://" + net.JoinHostPort(s.DialHost(), strconv.Itoa(s.APIServerPort))
}

// AdvertisedURL is the apiserver's address for its tenant and guests when no front door
// stands before it: on its advertise address (loopback unless one is given).
func (s Spec) AdvertisedURL() string {
	return "https://" + net.JoinHostPort(s.advertiseAddress(), strconv.Itoa(s.APIServerPort))
}

// DialHost is where the apiserver can be dialled on this host.
func (s Spec) DialHost() string {
	if ip := net.ParseIP(s.bindAddress()); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return "127.0.0.1"
}

// Addresses are the IPs a client may dial the apiserver at besides loopback: its bind
// address when it is one, and its advertise address. Its serving certificate carries them.
func (s Spec) Addresses() []string {
	var out []string
	for _, a := range []string{s.DialHost(), s.advertiseAddress()} {
		if a != "127.0.0.1" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (s Spec) bindAddress() string {
	if s.BindAddress == "" {
		return "127.0.0.1"
	}
	return s.BindAddress
}

func (s Spec) advertiseAddress() string {
	if s.AdvertiseAddress != "" {
		return s.AdvertiseAddress
	}
	return s.DialHost()
}

// flags renders a flag map as sorted, deterministic "--key=value" arguments (k3s's
// GetArgs shape): a table of defaults is easier to read and test than appends.
func flags(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, "--"+k+"="+m[k])
	}
	return out
}
