// Package clusterprovider turns a declared cluster into a running process group and back:
// it leases the apiserver port, mints the cluster's credentials into its DataDir, assembles
// the steps (StepsFor) behind the identity guard, spawns them, and on teardown reaps them
// before it releases the lease.
package clusterprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/procgroup"
	"socialweb.computer/kcp/internal/tenantuser"
)

// Config is the provider's configuration.
type Config struct {
	// DataRoot holds the lease book and one DataDir per cluster (DataRoot/clusters/NAME).
	DataRoot    string
	BinDir      string // kine and the Kubernetes binaries
	PostgresBin string // "" means clusterstack.DefaultPostgresBin
	Ports       portallocator.Range
	SANs        []string // extra names for every apiserver's serving certificate
	// APIServerBindAddress and APIServerAdvertiseAddress are the tenant apiservers'
	// (clusterstack.Spec.BindAddress and AdvertiseAddress; "": loopback). The front's
	// apiserver, the operator's, stays on loopback.
	APIServerBindAddress, APIServerAdvertiseAddress string
	// FrontDoor, when it has a base domain, is how tenants and guests reach the tenant
	// apiservers: through one listener that routes by TLS server name (internal/frontdoor).
	// Each serving certificate then carries the cluster's front-door names, and the
	// tenant's kubeconfig and the guests' join material name the front door.
	FrontDoor FrontDoor
	// K3sBinary, when set, runs each tenant's control plane as "k3s server" (the k3s
	// flavour, clusterstack.Spec.K3sBinary) instead of kube-apiserver, the controller-manager
	// and the scheduler. The front stays kube-apiserver and kube-controller-manager.
	K3sBinary string
	// Grace is how long a component has between its stop signal and SIGKILL.
	Grace time.Duration
	// Log, when set, receives every component's output, prefixed with its name, as it is
	// written to the component's own log file (serve -v).
	Log io.Writer
	// OnEvent, when set, is told of each step's progress.
	OnEvent func(cluster string, e procgroup.Event)
	// The cloud controller manager's node policy for every cluster; zero values take the
	// CCM's defaults (no quota, 110 pods per node, a 5 s resync).
	MaxNodes    int
	PodsPerNode int
	NodeResync  time.Duration
	// Certificates is how long a leaf is valid and when it is renewed: every start of a
	// cluster (a bring-up, a wake, a restart) renews the leaves that are due.
	Certificates certrenewal.Policy
	// GuestPool is where each cluster's real guests get a /24 of their own
	// (guestnet.DefaultPool when unset).
	GuestPool netip.Prefix
	// Cgroups, when set, is where each tenant cluster gets its control group (its
	// processes in the leaves control-plane/ and nodes/ below it), with Limits for a
	// cluster whose spec sets none.
	Cgroups *cgroups.Hierarchy
	Limits  cgroups.Limits
	// TenantUsers runs every process of a tenant cluster as an OS user of its own
	// (internal/tenantuser), made at its first start and removed with its DataDir.
	TenantUsers bool
	// Objects caps the objects a tenant cluster stores unless its spec sets a cap
	// (internal/objectcap); 0 is none.
	Objects int64
	// CompactionInterval is how often each tenant's apiserver compacts its datastore's
	// history (0: clusterstack.DefaultCompactionInterval, the kube-apiserver's own).
	CompactionInterval time.Duration
	// Logger receives the provider's own notes (an object cap put on or lifted); nil
	// discards them.
	Logger *slog.Logger
	// External, when set, is the PostgreSQL server that holds the datastores of clusters
	// whose spec.datastore is external (internal/externaldb).
	External *externaldb.Server
	// KeepIdentity, when set, keeps an external cluster's identity where another instance
	// finds it (Loop.KeepIdentity: a Secret on the front), before its datastore is taken
	// and the identity guard writes the identity there.
	KeepIdentity func(ctx context.Context, cluster, uid string) error
}

// FrontDoor is where the front door serves tenants.
type FrontDoor struct {
	Names frontdoor.Names
	Port  int // the port clients dial: the listener's, or a port forwarded to it
}

// URL is cluster's apiserver as seen through the front door; "" when it is off.
func (f FrontDoor) URL(cluster string) string {
	names := f.Names.Of(cluster)
	if f.Names.BaseDomain == "" || len(names) == 0 {
		return ""
	}
	return "https://" + net.JoinHostPort(names[0], strconv.Itoa(f.Port))
}

// InstallHint is what a missing binary's error tells the operator to run.
const InstallHint = "deploy/install-components.sh"

// Provider runs clusters.
type Provider struct {
	cfg  Config
	book *portallocator.Book
	// sweeper ends the late logins of a fenced holder after each take of an external
	// datastore (nil without one).
	sweeper *externaldb.Sweeper

	namesMu sync.Mutex
	names   *frontdoor.Names // the front door's names now (SetFrontDoorNames); nil: cfg's
}

// SetFrontDoorNames is the front door's names from now on (the Clusters' extra names
// changed): what a serving certificate minted from now on carries.
func (p *Provider) SetFrontDoorNames(n frontdoor.Names) {
	p.namesMu.Lock()
	defer p.namesMu.Unlock()
	p.names = &n
}

// doorNow is the front door as it is now: its port, and its names as last set.
func (p *Provider) doorNow() FrontDoor {
	p.namesMu.Lock()
	defer p.namesMu.Unlock()
	f := p.cfg.FrontDoor
	if p.names != nil {
		f.Names = *p.names
	}
	return f
}

// servingNames are the front-door names cluster's serving certificate must carry now.
func (p *Provider) servingNames(cluster string) []string { return p.doorNow().Names.Of(cluster) }

// New opens the provider's lease book under DataRoot.
func New(cfg Config) (*Provider, error) {
	if cfg.DataRoot == "" {
		return nil, errors.New("config: DataRoot is empty: set --data-root")
	}
	if cfg.PostgresBin == "" {
		cfg.PostgresBin = clusterstack.DefaultPostgresBin
	}
	if err := ensureDir(cfg.DataRoot, 0o711, -1); err != nil {
		return nil, fmt.Errorf("config: data root %s: %w", cfg.DataRoot, err)
	}
	if err := ensureDir(filepath.Join(cfg.DataRoot, "clusters"), 0o711, -1); err != nil {
		return nil, fmt.Errorf("config: data root %s: %w", cfg.DataRoot, err)
	}
	book, err := portallocator.Open(filepath.Join(cfg.DataRoot, "leases.json"), cfg.Ports)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if b := cfg.APIServerBindAddress; b != "" {
		book.ProbeOn("127.0.0.1", b)
	}
	p := &Provider{cfg: cfg, book: book}
	if cfg.External != nil {
		p.sweeper = externaldb.NewSweeper(*cfg.External)
	}
	return p, nil
}

// Leases is the lease book (for inspection and tests).
func (p *Provider) Leases() *portallocator.Book { return p.book }

// CertificatePolicy is the validity and renewal share of the certificates it mints.
func (p *Provider) CertificatePolicy() certrenewal.Policy { return p.cfg.Certificates }

// DataDir is where the cluster named name keeps everything.
func (p *Provider) DataDir(name string) string { return DataDirOf(p.cfg.DataRoot, name) }

// templates is where the provider keeps what it copies for new clusters instead of making
// it for each (a Postgres data directory, internal/pgtemplate).
func (p *Provider) templates() string { return filepath.Join(p.cfg.DataRoot, "templates") }

// DataDirOf is the DataDir of cluster name under dataRoot.
func DataDirOf(dataRoot, name string) string { return filepath.Join(dataRoot, "clusters", name) }

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// ValidateName checks a cluster name: a DNS-1123 label of at most 40 characters, so that
// every derived name (DataDir, certificate names, node names) stays valid.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > 40 || !nameRE.MatchString(name) {
		return fmt.Errorf("cluster name %q: want 1-40 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit", name)
	}
	return nil
}

// RequiredBinaries are the binaries the provider's stacks run: a tenant's, of the
// configured flavour, then the front's. They are the programs the backstop reaps.
func (p *Provider) RequiredBinaries() []string {
	tenant := clusterstack.Spec{BinDir: p.cfg.BinDir, PostgresBin: p.cfg.PostgresBin, K3sBinary: p.cfg.K3sBinary}
	front := clusterstack.Spec{BinDir: p.cfg.BinDir, Front: true}
	all := binariesOf(tenant)
	if p.cfg.K3sBinary == "" {
		// A group an earlier provider started as three processes is adopted as it runs.
		split := tenant
		split.SplitControlPlane = true
		all = append(all, binariesOf(split)...)
	}
	var out []string
	for _, b := range append(all, binariesOf(front)...) {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// binariesOf are the binaries s's stack runs, in start order: each component's argv[0].
// The k3s flavour runs no kube-apiserver, controller-manager or scheduler.
func binariesOf(s clusterstack.Spec) []string {
	var comps []procgroup.Component
	var out []string
	if !s.Front {
		out = append(out, s.InitdbArgv()[0])
		comps = append(comps, procgroup.ComponentPostgres)
	}
	comps = append(comps, procgroup.ComponentKine)
	comps = append(comps, s.ControlPlane()...)
	if !s.Front {
		comps = append(comps, procgroup.ComponentCloudControllerManager, procgroup.ComponentKwok)
	}
	for _, c := range comps {
		if argv, err := s.Argv(c); err == nil {
			out = append(out, argv[0])
		}
	}
	return out
}

// maxSocketPath is the kernel's limit on a unix socket's path (sun_path, 108 bytes with its
// NUL): Postgres refuses to start on a longer one.
const maxSocketPath = 107

// checkSocketPaths refuses a DataDir whose unix sockets would be too long, before anything
// is created, naming the data root (invariant 18).
func checkSocketPaths(dataDir string) error {
	l := clusterstack.Spec{DataDir: dataDir}.Layout()
	for _, sock := range []string{l.PostgresSocket(), l.KineSocket(), l.ControlSocket()} {
		if len(sock) > maxSocketPath {
			return fmt.Errorf("data root: the socket %s would be %d bytes, the limit is %d; use a shorter --data-root or cluster name", sock, len(sock), maxSocketPath)
		}
	}
	return nil
}

// ErrMissingBinary: a component's binary is not installed.
var ErrMissingBinary = errors.New("binary not installed")

// checkBinaries checks the binaries s runs. The front checks every binary the provider
// runs: serve brings it up first, so a missing one stops serve before anything starts.
func (p *Provider) checkBinaries(s clusterstack.Spec) error {
	bins := binariesOf(s)
	if s.Front {
		bins = p.RequiredBinaries()
	}
	for _, b := range bins {
		st, err := os.Stat(b)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			if b == p.cfg.K3sBinary {
				return fmt.Errorf("%w: %s is missing or not executable; install k3s there or give another --k3s-binary", ErrMissingBinary, b)
			}
			return fmt.Errorf("%w: %s is missing or not executable; run %s", ErrMissingBinary, b, InstallHint)
		}
	}
	return nil
}

// Cluster is one running cluster.
type Cluster struct {
	Name             string
	DataDir          string
	Port             int
	URL              string
	TenantKubeconfig string
	Spec             clusterstack.Spec

	p       *Provider
	group   *procgroup.Group
	mu      sync.Mutex
	stopped bool
	// stopDone closes when the first Stop (or Detach) has ended, stopErr its error: a
	// second Stop waits for the first rather than return while it still reaps.
	stopDone chan struct{}
	stopErr  error
	// keepLease: the stop keeps the port leased for the restart that follows
	// (StopToRestart).
	keepLease bool
	snapMu    sync.Mutex // serialises edits of nodes.json
	admin     kubernetes.Interface
	objects   atomic.Int64   // its stored objects at the last count
	cgroup    *cgroups.Group // the cluster's control group; nil when cgroups are off
	as        runAs          // who its processes run as

	nodesMu sync.Mutex
	nodes   *procgroup.Group            // the node group (kwok), started with the first simulated guest
	guests  map[string]*procgroup.Group // each real guest's init, by node id
	// guestExits are the real guests whose init exited on its own, by node id.
	guestExits map[string]procgroup.Exit
	// guestsClosed is set by Stop when it lists the real guests to stop: none starts after.
	guestsClosed bool
	real         *nodeprovider.Real // the provider of real guests, made at first use

	exited   chan procgroup.Exit // the first member of either group to exit on its own
	stopping chan struct{}       // closed by Stop: the watchers end

	doorNames []string // the front-door names its serving certificate carries

	// inputs is the digest of what its components read (inputsDigest), recorded with each
	// process; adopted says this run took the cluster over running, and stale why it runs
	// other than this provider would start it (Adopted).
	inputs  string
	adopted bool
	stale   []string
	// renewAt is when the first of its leaf certificates falls due (RenewalDue), read once
	// it was minted; renewScheduled is false when none will.
	renewAt        time.Time
	renewScheduled bool
}

// EnsureServingNames mints the serving certificate again, from the same CA, when the
// cluster's front-door names changed since it was minted (an extra name given or taken
// while it runs). kube-apiserver reloads its certificate when the file changes, so
// nothing restarts; it says whether it minted. One caller at a time (the loop's pass).
func (c *Cluster) EnsureServingNames() (bool, error) {
	want := c.p.servingNames(c.Name)
	if slices.Equal(want, c.doorNames) {
		return false, nil
	}
	sans := append(append(slices.Clone(c.p.cfg.SANs), want...), c.Spec.Addresses()...)
	if err := EnsureCredentials(c.Spec, sans, c.URL, c.p.cfg.Certificates); err != nil {
		return false, fmt.Errorf("cluster %s: serving certificate for %v: %w", c.Name, want, err)
	}
	// The certificate is minted anew (another file): the apiserver's user is given it.
	if err := c.as.own(c.Spec); err != nil {
		return false, fmt.Errorf("cluster %s: serving certificate for %v: %w", c.Name, want, err)
	}
	c.doorNames = want
	return true, nil
}

// Exited delivers the first member of the cluster's groups (the process group or the node
// group) that exits on its own.
func (c *Cluster) Exited() <-chan procgroup.Exit { return c.exited }

// watch forwards g's first unexpected exit to Exited.
func (c *Cluster) watch(g *procgroup.Group) {
	go func() {
		select {
		case ex := <-g.Exited():
			select {
			case c.exited <- ex:
			default: // one is enough: the caller reaps everything
			}
		case <-c.stopping:
		}
	}()
}

// Group is the cluster's process group.
func (c *Cluster) Group() *procgroup.Group { return c.group }

// NodeGroup is the cluster's node group (kwok), nil until its first simulated guest.
func (c *Cluster) NodeGroup() *procgroup.Group {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	return c.nodes
}

// Up brings the cluster named name up and returns once every gate has passed. Bad input
// (a bad name, a missing binary, no free port, an unwritable DataDir) is an error that
// changes nothing and leaves nothing running.
func (p *Provider) Up(ctx context.Context, name string) (*Cluster, error) {
	return p.UpWith(ctx, name, NodePolicy{MaxNodes: p.cfg.MaxNodes, PodsPerNode: p.cfg.PodsPerNode})
}

// NodePolicy is one cluster's own policy: its node quota and pods per node, for its CCM
// (zero values take the CCM's defaults), its resource limits (zero fields take the
// provider's Config.Limits) and its cap on stored objects (zero: Config.Objects).
type NodePolicy struct {
	MaxNodes    int
	PodsPerNode int
	Resources   cgroups.Limits
	Objects     int64
	// ExternalUID, when set, puts the cluster's datastore on the external server, in the
	// database of the Cluster with this front uid (externaldb.TenantOf), taken at
	// ExternalEpoch (its binding's, v1alpha1.EpochAnnotation).
	ExternalUID   string
	ExternalEpoch int64
}

// UpWith is Up with the cluster's own node policy (a Cluster's spec on the front).
func (p *Provider) UpWith(ctx context.Context, name string, np NodePolicy) (*Cluster, error) {
	s, np, err := p.tenantWith(name, np)
	if err != nil {
		return nil, err
	}
	return p.upSpecWith(ctx, s, np)
}

// tenantWith is the stack of the tenant cluster name under its node policy, and the
// policy with the provider's defaults where it sets none.
func (p *Provider) tenantWith(name string, np NodePolicy) (clusterstack.Spec, NodePolicy, error) {
	if err := ValidateName(name); err != nil {
		return clusterstack.Spec{}, np, err
	}
	s := p.tenantSpec(name)
	s.MaxNodes, s.PodsPerNode = np.MaxNodes, np.PodsPerNode
	if np.ExternalUID != "" {
		if p.cfg.External == nil {
			return s, np, fmt.Errorf("cluster %s: %w", name, errNoExternalDatastore)
		}
		t, err := externaldb.TenantOf(np.ExternalUID)
		if err != nil {
			return s, np, fmt.Errorf("cluster %s: %w", name, err)
		}
		s.External = &clusterstack.External{Host: p.cfg.External.Host, Port: p.cfg.External.Port, Database: t.Database, Role: t.Role, Epoch: np.ExternalEpoch}
	}
	np.Resources = np.Resources.Or(p.cfg.Limits)
	if np.Objects == 0 {
		np.Objects = p.cfg.Objects
	}
	return s, np, nil
}

// tenantSpec is the stack of the tenant cluster name on this provider.
func (p *Provider) tenantSpec(name string) clusterstack.Spec {
	return clusterstack.Spec{
		Name: name, DataDir: p.DataDir(name), BinDir: p.cfg.BinDir, PostgresBin: p.cfg.PostgresBin, K3sBinary: p.cfg.K3sBinary,
		NodeResync: p.cfg.NodeResync, BindAddress: p.cfg.APIServerBindAddress, AdvertiseAddress: p.cfg.APIServerAdvertiseAddress,
		CompactionInterval: p.cfg.CompactionInterval,
	}
}

// CgroupSubtree names the control-group subtree of the provider whose data root is
// dataRoot: one per data root, so that two providers on a host (tests, a second instance)
// never share one, and a provider restarted on the same data root finds its own.
func CgroupSubtree(dataRoot string) string {
	abs, err := filepath.Abs(dataRoot)
	if err != nil {
		abs = dataRoot
	}
	sum := sha256.Sum256([]byte(abs))
	return "socialweb-kcp-" + hex.EncodeToString(sum[:4])
}

// FrontName is the management API server's cluster name; its DataDir is <data-root>/front,
// apart from the tenants' clusters/, and its lease holder cannot be a tenant's.
const FrontName = "front"

// UpFront brings up the provider's own management API server (the embedded front): kine on
// SQLite, kube-apiserver, and a controller-manager for namespaces and garbage collection.
func (p *Provider) UpFront(ctx context.Context) (*Cluster, error) {
	s := p.frontSpec()
	pol := NodePolicy{Resources: p.cfg.Limits, Objects: p.cfg.Objects}
	// The front an earlier run left running (serve --on-exit keep) is adopted when it is
	// proven and current; a stale one is the operator's alone, and is simply restarted.
	c, err := p.upOrAdopt(ctx, s, pol, true)
	if err != nil && ctx.Err() != nil {
		// Stopped while it proved the front: nothing was touched, and a stop that keeps
		// the clusters must not reap it now.
		return nil, err
	}
	if err == nil {
		_, stale := c.Adopted()
		if len(stale) == 0 {
			return c, nil
		}
		err = fmt.Errorf("stale: %v", stale)
		if serr := c.Stop(); serr != nil {
			return nil, serr
		}
	}
	if p.cfg.Logger != nil && !errors.Is(err, errNothingToAdopt) {
		p.cfg.Logger.Info("the front is not adopted; bringing it up", "why", err)
	}
	return p.upSpec(ctx, s)
}

// UpFrontAfresh brings the front up with no adoption: what an earlier run left of it is
// reaped first (serve --adopt=false).
func (p *Provider) UpFrontAfresh(ctx context.Context) (*Cluster, error) {
	return p.upSpec(ctx, p.frontSpec())
}

func (p *Provider) frontSpec() clusterstack.Spec {
	return clusterstack.Spec{Name: FrontName, DataDir: filepath.Join(p.cfg.DataRoot, FrontName), BinDir: p.cfg.BinDir, Front: true}
}

func leaseHolder(s clusterstack.Spec) string {
	if s.Front {
		return frontHolder
	}
	return s.Name + "/kube-apiserver"
}

const frontHolder = "socialweb:front/kube-apiserver"

// holderDataDir is leaseHolder's inverse: the DataDir whose group holds a lease.
func (p *Provider) holderDataDir(holder string) string {
	if holder == frontHolder {
		return filepath.Join(p.cfg.DataRoot, FrontName)
	}
	return p.DataDir(strings.TrimSuffix(holder, "/kube-apiserver"))
}

func (p *Provider) upSpec(ctx context.Context, s clusterstack.Spec) (*Cluster, error) {
	return p.upSpecWith(ctx, s, NodePolicy{Resources: p.cfg.Limits, Objects: p.cfg.Objects})
}

// upSpecWith brings s up, held to pol's resources and object cap (defaults applied).
func (p *Provider) upSpecWith(ctx context.Context, s clusterstack.Spec, pol NodePolicy) (*Cluster, error) {
	return p.upOrAdopt(ctx, s, pol, false)
}

// AdoptWith takes over the cluster named name as an earlier run of the provider left it
// running, when every process of it is proven ours and passes its gate (procgroup.Adopt):
// no process of its control plane starts or stops, and its tenant sees nothing. (Its
// DataDir is laid out and its credentials minted as at any start: a certificate renewed
// then makes it stale.) It is ErrNotAdopted, having signalled no process, when the cluster
// does not run or cannot be proven; UpWith then reaps what is there and brings it up. An
// adopted cluster may be stale (Adopted).
func (p *Provider) AdoptWith(ctx context.Context, name string, np NodePolicy) (*Cluster, error) {
	s, np, err := p.tenantWith(name, np)
	if err != nil {
		return nil, err
	}
	return p.upOrAdopt(ctx, s, np, true)
}

// upOrAdopt brings s up or, with adopt, takes over what runs of it (AdoptWith).
func (p *Provider) upOrAdopt(ctx context.Context, s clusterstack.Spec, pol NodePolicy, adopt bool) (*Cluster, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // stopping: nothing is reaped, nothing starts
	}
	if err := p.checkBinaries(s); err != nil {
		return nil, err
	}
	if err := checkSocketPaths(s.DataDir); err != nil {
		return nil, err
	}
	holder := leaseHolder(s)
	if adopt {
		// What runs holds its port: no lease, nothing of it can be serving.
		port := p.book.Held(holder)
		if port == 0 {
			return nil, fmt.Errorf("cluster %s: %w (it holds no port)", s.Name, errNothingToAdopt)
		}
		if running, _ := procgroup.Running(s.Layout().RunDir()); len(running) == 0 {
			return nil, fmt.Errorf("cluster %s: %w", s.Name, errNothingToAdopt)
		}
		s.APIServerPort = port
		return p.up(ctx, s, pol, true)
	}
	port, err := p.book.Acquire(holder)
	if err != nil {
		return nil, err
	}
	s.APIServerPort = port
	c, err := p.up(ctx, s, pol, false)
	if err != nil {
		// Spawn reaped whatever it had started; only now may the lease go (invariant 8).
		if rerr := p.book.Release(port, holder); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return c, nil
}

// up brings s up behind its gates or, with adopt, adopts the group an earlier run left
// (procgroup.Adopt), signalling nothing that runs if it cannot.
func (p *Provider) up(ctx context.Context, s clusterstack.Spec, pol NodePolicy, adopt bool) (*Cluster, error) {
	name, port := s.Name, s.APIServerPort
	l := s.Layout()
	as, err := p.runAs(s)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	fresh := !exists(l.Root)
	if adopt && fresh {
		return nil, fmt.Errorf("cluster %s: %w (no DataDir)", name, errNothingToAdopt)
	}
	// A bring-up runs the control plane as one process; an adoption proves the layout
	// the earlier run started, three processes where a provider before the one process
	// started it.
	s.SplitControlPlane = false
	if adopt && !s.Front {
		recorded, err := procgroup.Recorded(l.RunDir())
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w: %v", name, ErrNotAdopted, err)
		}
		s.SplitControlPlane = slices.Contains(recorded, procgroup.ComponentControllerManager)
	}
	if err := p.makeDataDir(s, as); err != nil {
		if fresh {
			os.RemoveAll(l.Root)
		}
		return nil, fmt.Errorf("cluster %s: DataDir %s: %w", name, l.Root, err)
	}
	restore, restoring, err := p.stagedRestore(name)
	if err != nil {
		return nil, err
	}
	restoring = restoring && !s.Front && !adopt
	if restoring && s.External != nil {
		return nil, fmt.Errorf("cluster %s: a restore into an external datastore is not supported: restore it with spec.datastore local", name)
	}
	if restoring {
		if err := p.placeRestoredIdentity(s, restore); err != nil {
			return nil, err
		}
	}
	id, url, doorNames, err := p.mint(s)
	if err != nil {
		return nil, err
	}
	if err := as.own(s); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	admin, err := adminClient(l.AdminKubeconfig())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c := &Cluster{Name: name, DataDir: l.Root, Port: port, URL: url, TenantKubeconfig: l.TenantKubeconfig(), Spec: s, p: p, admin: admin, exited: make(chan procgroup.Exit, 1), stopping: make(chan struct{}), stopDone: make(chan struct{}),
		doorNames: doorNames, as: as, inputs: inputsDigest(l)}
	c.renewAt, c.renewScheduled = p.nextRenewal(l.Root)
	logsFrom := logSizes(l)
	in := StepInput{Spec: s, Identity: id, Admin: admin, As: as, Templates: p.templates(), External: p.cfg.External, Sweeper: p.sweeper}
	if keep := p.cfg.KeepIdentity; keep != nil && s.External != nil {
		uid := pol.ExternalUID
		in.KeepIdentity = func(ctx context.Context) error { return keep(ctx, name, uid) }
	}
	if restoring {
		in.Restore = p.restoreDir(name)
	}
	if p.cfg.Cgroups != nil && !s.Front {
		// The cluster's group is made, with its limits, before its first process; its
		// processes are in leaves below it (control-plane/, nodes/), as v2 wants. (An
		// adopted cluster's exist: its limits are set again.)
		c.cgroup = p.cfg.Cgroups.Group(name)
		controlPlane := p.cfg.Cgroups.Group(name, "control-plane")
		if err := c.cgroup.Create(pol.Resources); err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", name, err), c.removeCgroup())
		}
		if err := controlPlane.Create(cgroups.Limits{}); err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", name, err), c.removeCgroup())
		}
		in.Cgroup = controlPlane
	}
	steps, err := StepsFor(in)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cluster %s: %w", name, err), c.removeCgroup())
	}
	opts := p.groupOptions(s)
	opts.Inputs = c.inputs
	if adopt {
		g, a, err := procgroup.Adopt(ctx, opts, steps)
		if err != nil {
			// Nothing was touched: what runs is the bring-up's to reap.
			return nil, fmt.Errorf("cluster %s: %w: %v", name, ErrNotAdopted, err)
		}
		c.group, c.adopted, c.stale = g, true, a.Stale
		// The real guests an earlier run left are booted again (their pods restart; the
		// tenant's API does not): their inits are not adopted yet. kwok is, by
		// startNodeGroup, when it proves itself.
		if err := p.reapGuestSurvivors(s); err != nil {
			g.Release()
			return nil, fmt.Errorf("cluster %s: %w: reap the real guests' survivors: %v", name, ErrNotAdopted, err)
		}
	} else {
		if err := ctx.Err(); err != nil {
			return nil, err // stopping: what runs is left as it is (serve --on-exit keep)
		}
		// The guests an earlier run left (real ones, kwok) go first: they depend on the
		// control plane.
		if err := p.reapGuestSurvivors(s); err != nil {
			return nil, fmt.Errorf("cluster %s: reap the real guests' survivors: %w", name, err)
		}
		if _, err := procgroup.ReapSurvivors(p.nodeGroupOptions(s)); err != nil {
			return nil, fmt.Errorf("cluster %s: reap the node group's survivors: %w", name, err)
		}
		g, err := procgroup.Spawn(ctx, opts, steps)
		if err != nil {
			removeStale(l.KineSocket())
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", name, err), c.removeCgroup())
		}
		c.group = g
		if restoring {
			// Ready on the restored data: the staging has served.
			if err := p.finishRestore(s); err != nil && p.cfg.Logger != nil {
				p.cfg.Logger.Warn("the restore's staging was not removed", "cluster", name, "err", err)
			}
		}
	}
	c.watch(c.group)
	go c.keepLogs(logsFrom)
	if !s.Front {
		go c.holdObjectCap(pol.Objects)
	}
	// Guests listed from an earlier run come back: simulated ones get kwok again (or keep
	// the one that runs), real ones boot again from their directories (their kubelets keep
	// their certificates).
	if list, err := c.Instances(); err == nil && len(list) > 0 {
		if err := c.restartGuests(ctx, list); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if adopt && c.NodeGroup() == nil {
		// A kwok the earlier run left that no listed guest needs now is no one's: reaped.
		if _, err := procgroup.ReapSurvivors(p.nodeGroupOptions(s)); err != nil {
			c.Stop()
			return nil, fmt.Errorf("cluster %s: reap the node group's survivors: %w", name, err)
		}
	}
	return c, nil
}

// mint makes sure of the cluster's identity and credentials in its laid-out DataDir: what
// it has is kept, what it lacks is minted. It returns the URL its tenant kubeconfig names
// and the front-door names its serving certificate carries.
func (p *Provider) mint(s clusterstack.Spec) (Identity, string, []string, error) {
	id, err := ensureIdentity(s)
	if err != nil {
		return Identity{}, "", nil, fmt.Errorf("cluster %s: %w", s.Name, err)
	}
	sans, url, doorNames := p.cfg.SANs, s.AdvertisedURL(), []string(nil)
	if !s.Front { // the front is the operator's, never behind the tenants' door
		doorNames = p.servingNames(s.Name)
		sans = append(slices.Clone(sans), doorNames...)
		sans = append(sans, s.Addresses()...) // where it listens and what it advertises
		if u := p.doorNow().URL(s.Name); u != "" {
			url = u
		}
	}
	if err := EnsureCredentials(s, sans, url, p.cfg.Certificates); err != nil {
		return Identity{}, "", nil, fmt.Errorf("cluster %s: credentials: %w", s.Name, err)
	}
	return id, url, doorNames, nil
}

// Minted is a cluster declared asleep: its identity and credentials exist, its datastore
// and processes do not yet.
type Minted struct {
	Name             string
	URL              string // the server its tenant kubeconfig names: the front door's
	TenantKubeconfig string // the file
}

// Mint lays out the DataDir of a cluster created asleep and mints its identity and
// credentials, without a port, a datastore or a process: what a later bring-up finds and
// keeps (its kubeconfigs pointed at the port it leases then). It needs the front door,
// through which the tenant kubeconfig reaches the cluster, and the first request wakes it.
func (p *Provider) Mint(name string) (Minted, error) {
	if err := ValidateName(name); err != nil {
		return Minted{}, err
	}
	if p.cfg.FrontDoor.URL(name) == "" {
		return Minted{}, fmt.Errorf("cluster %s: created asleep without a front door: nothing would wake it", name)
	}
	s := p.tenantSpec(name)
	l := s.Layout()
	as, err := p.runAs(s)
	if err != nil {
		return Minted{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	fresh := !exists(l.Root)
	if err := p.makeDataDir(s, as); err != nil {
		if fresh {
			os.RemoveAll(l.Root)
		}
		return Minted{}, fmt.Errorf("cluster %s: DataDir %s: %w", name, l.Root, err)
	}
	_, url, _, err := p.mint(s)
	if err != nil {
		return Minted{}, err
	}
	return Minted{Name: name, URL: url, TenantKubeconfig: l.TenantKubeconfig()}, nil
}

// DropExternal removes the external database and role of the Cluster whose front uid is
// uid: the teardown of a deleted cluster whose datastore is external.
func (p *Provider) DropExternal(ctx context.Context, uid string) error {
	if p.cfg.External == nil {
		return errNoExternalDatastore
	}
	t, err := externaldb.TenantOf(uid)
	if err != nil {
		return err
	}
	return p.cfg.External.Drop(ctx, t)
}

// HasDatastore says whether the cluster's datastore was ever initialised (its Postgres
// data directory exists): a cluster created asleep has none until its first wake.
func (p *Provider) HasDatastore(name string) bool {
	return exists(p.tenantSpec(name).Layout().PostgresData())
}

// nodeGroupOptions are the node group's: its own record directory and only kwok for the
// backstop, so that starting kwok never reaps the running control plane. (The control
// plane's own Spawn does reap a kwok an earlier run left: kwok is among its Programs.)
func (p *Provider) nodeGroupOptions(s clusterstack.Spec) procgroup.Options {
	o := p.groupOptions(s)
	o.RecordDir = s.Layout().NodeRunDir()
	o.Programs = []string{s.Bin("kwok")}
	return o
}

func (p *Provider) groupOptions(s clusterstack.Spec) procgroup.Options {
	o := procgroup.Options{
		RecordDir: s.Layout().RunDir(), Grace: p.cfg.Grace,
		Marker: s.DataDir + string(filepath.Separator), Programs: p.RequiredBinaries(),
	}
	if p.cfg.OnEvent != nil {
		o.OnEvent = func(e procgroup.Event) { p.cfg.OnEvent(s.Name, e) }
	}
	return o
}

// runAs is who s's processes run as: with tenant users, its own user, made now if it is
// not yet (the front's processes stay the provider's).
func (p *Provider) runAs(s clusterstack.Spec) (runAs, error) {
	if !p.cfg.TenantUsers || s.Front {
		return runAs{}, nil
	}
	u, err := tenantuser.Ensure(tenantuser.Name(s.DataDir), "socialweb-kcp cluster "+s.Name)
	if err != nil {
		return runAs{}, err
	}
	return runAs{user: &u}, nil
}

// makeDataDir lays out the DataDir: 0710 with the group of the user Postgres runs as,
// which may traverse it and nothing more; every file in it is 0600. With tenant users
// that is the cluster's user, and it may also traverse pki/ (0710) to the files its group
// may read, and write in the directories that are its own (sock/, audit/; postgres/ is
// made by initdb). run/, the process records, stays root's alone.
func (p *Provider) makeDataDir(s clusterstack.Spec, as runAs) error {
	gid, err := as.group()
	if err != nil {
		return err
	}
	l := s.Layout()
	if err := ensureDir(l.Root, 0o710, gid); err != nil {
		return err
	}
	pki, group, user := os.FileMode(0o700), -1, -1
	if as.user != nil {
		pki, group, user = 0o710, gid, as.user.UID
	}
	if err := ensureDir(l.PKIDir(), pki, group); err != nil {
		return err
	}
	for _, d := range []string{l.KineSocketDir(), l.AuditDir()} {
		if err := ensureDirOwned(d, 0o700, user, group); err != nil {
			return err
		}
	}
	for _, d := range []string{l.RunDir(), l.NodeRunDir(), l.LogDir()} {
		if err := ensureDir(d, 0o700, -1); err != nil {
			return err
		}
	}
	// Prove the directory is writable now, before anything starts.
	probe := filepath.Join(l.RunDir(), ".writable")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return err
	}
	return os.Remove(probe)
}

func ensureDir(path string, mode os.FileMode, gid int) error {
	return ensureDirOwned(path, mode, -1, gid)
}

// ensureDirOwned is ensureDir with an owner too (-1: ours, root).
func ensureDirOwned(path string, mode os.FileMode, uid, gid int) error {
	if err := os.MkdirAll(path, mode.Perm()); err != nil {
		return err
	}
	if uid < 0 {
		uid = os.Getuid()
	}
	if gid < 0 {
		gid = os.Getgid()
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode) // MkdirAll is subject to the umask and leaves existing modes
}

// Stop reaps the cluster's group in reverse order, removes its sockets, and only then
// releases its port lease. Its data is kept. Stop is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		<-c.stopDone // a Stop under way: its end, and its error
		return c.stopErr
	}
	c.stopped = true
	close(c.stopping)
	c.mu.Unlock()
	err := c.stop()
	c.stopErr = err
	close(c.stopDone)
	return err
}

// StopToRestart stops the cluster as Stop does, but keeps its port leased: the bring-up
// that follows (a renewal's restart, an upgrade's) serves at the very URL its tenants'
// kubeconfigs name, whatever else started meanwhile. A teardown releases the lease.
func (c *Cluster) StopToRestart() error {
	c.mu.Lock()
	c.keepLease = true
	c.mu.Unlock()
	return c.Stop()
}

func (c *Cluster) stop() error {
	// The guests first: they are kubelets (real or kwok's) of this apiserver.
	err := c.stopRealGuests()
	c.nodesMu.Lock()
	nodes := c.nodes
	c.nodesMu.Unlock()
	if nodes != nil {
		err = errors.Join(err, nodes.Reap())
	}
	err = errors.Join(err, c.group.Reap())
	if err == nil {
		err = c.removeCgroup()
	}
	if rerr := removeStale(c.Spec.Layout().KineSocket()); rerr != nil {
		err = errors.Join(err, rerr)
	}
	c.mu.Lock()
	keep := c.keepLease
	c.mu.Unlock()
	if err == nil && !keep {
		// A lease whose holder may still run stays leased (invariant 8).
		err = c.p.book.Release(c.Port, leaseHolder(c.Spec))
	}
	return err
}

// removeCgroup removes the cluster's control group, its node group's with it, once
// nothing of the cluster runs; the kernel refuses while a process is left in it.
func (c *Cluster) removeCgroup() error {
	if c.cgroup == nil {
		return nil
	}
	if err := c.cgroup.Remove(); err != nil {
		return err
	}
	c.p.cfg.Cgroups.Prune()
	return nil
}

// Usage is what the cluster's control group uses now; false when it has none.
func (c *Cluster) Usage() (cgroups.Usage, bool) {
	if c.cgroup == nil {
		return cgroups.Usage{}, false
	}
	u, err := c.cgroup.Usage()
	return u, err == nil
}

// whileRunning is ctx, ended too after d or when the cluster stops: an operation on its
// guests waits on its apiserver, which is gone once it stops (a Node deleted while its
// Cluster is torn down would otherwise poll for the CCM forever, holding a worker).
func (c *Cluster) whileRunning(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	go func() {
		select {
		case <-c.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Destroy stops the cluster and removes its DataDir: nothing of it survives (invariant 15).
func (c *Cluster) Destroy() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.p.RemoveDataDir(c.Name)
}

// RemoveDataDir removes cluster name's DataDir, and its OS user with it (tenant users):
// the last of a deleted cluster. Nothing of it may run (the caller reaped it).
func (p *Provider) RemoveDataDir(name string) error {
	dir := p.DataDir(name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	// A restore staged for it and never brought up goes with it.
	if err := os.RemoveAll(p.restoreDir(name)); err != nil {
		return err
	}
	if p.cfg.TenantUsers {
		return tenantuser.Remove(tenantuser.Name(dir))
	}
	return nil
}

func adminClient(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig %s: %w", path, err)
	}
	cfg.Timeout = 5 * time.Second
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}
