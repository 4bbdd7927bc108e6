package cloudprovider

import (
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
)

// Cloud is the cloudprovider.Interface the CCM runs: InstancesV2 over the snapshot, and
// nothing else (no routes, no load balancers, no zones, no clusters).
type Cloud struct {
	cfg       Config
	ready     io.Writer // where the readiness line goes (stdout)
	instances *FileInstances
	quota     *Quota

	once sync.Once
	stop <-chan struct{}
}

// New makes the cloud for cfg. The readiness line is written to ready once the Node
// informer has synced.
func New(cfg Config, ready io.Writer) *Cloud {
	q := &Quota{Cluster: cfg.Cluster, Max: cfg.MaxNodes}
	return &Cloud{
		cfg: cfg, ready: ready, quota: q,
		instances: &FileInstances{Path: cfg.InstancesFile, Cluster: cfg.Cluster, PodsPerNode: cfg.PodsPerNode, Admit: q.Admit},
	}
}

// Initialize starts the event pipeline the quota reports through.
func (c *Cloud) Initialize(cb cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.stop = stop
	client := cb.ClientOrDie("socialweb-cloud-provider")
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c.quota.Recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "socialweb-cloud-controller-manager"})
	go func() { <-stop; b.Shutdown() }()
}

// SetInformers takes the Node lister the quota counts with, and prints the readiness line
// once the shared Node informer (the one the controllers use) has synced.
func (c *Cloud) SetInformers(f informers.SharedInformerFactory) {
	nodes := f.Core().V1().Nodes()
	c.quota.Nodes = nodes.Lister()
	inf := nodes.Informer()
	go func() {
		if cache.WaitForCacheSync(c.stop, inf.HasSynced) {
			c.once.Do(func() { fmt.Fprintln(c.ready, contract.ReadyLine(c.cfg.Cluster)) })
		}
	}()
}

func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return c.instances, true }
func (c *Cloud) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }
func (c *Cloud) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (c *Cloud) Routes() (cloudprovider.Routes, bool)             { return nil, false }
func (c *Cloud) ProviderName() string                             { return contract.ProviderName }

// HasClusterID is true: every provider ID carries the cluster's name.
func (c *Cloud) HasClusterID() bool { return true }

// Flags are the upstream cloud-controller-manager flags the CCM runs with, derived from the
// environment. They stay inside the process (the CCM's own argv is empty): it listens on
// nothing (seed D2), elects no leader (one CCM per cluster, supervised by its group), and
// uses its own credential for every controller.
func Flags(cfg Config) []string {
	resync := cfg.Resync.String()
	return []string{
		"--cloud-provider=" + contract.ProviderName,
		"--kubeconfig=" + cfg.Kubeconfig,
		"--cluster-name=" + cfg.Cluster,
		"--secure-port=0",
		"--webhook-secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--configure-cloud-routes=false",
		"--allocate-node-cidrs=false",
		"--node-monitor-period=" + resync,
		"--node-status-update-frequency=" + resync,
		"--concurrent-node-syncs=1", // the quota admits one Node at a time
		"--v=2",                     // logs each Node deletion and its reason
	}
}
