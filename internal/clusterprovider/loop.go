package clusterprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/frontevents"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/materialiser"
	"socialweb.computer/kcp/internal/parallel"
	"socialweb.computer/kcp/internal/procgroup"
)

// ClustersResource is the Cluster CRD's resource on the front.
var ClustersResource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "clusters"}

// The informers' indexes.
const (
	byLocal   = "local"
	byCluster = "cluster"
)

// Loop materialises the Clusters declared on a front (any Kubernetes API with the CRDs):
// watch-driven (an informer and a rate-limited work queue), each decision taken by
// materialiser.Reconcile, bring-ups run concurrently up to a limit, and a component that
// exits on its own is noticed at once.
type Loop struct {
	P        *Provider
	Front    dynamic.Interface
	Core     kubernetes.Interface // the front's Secrets (the delivered kubeconfigs)
	Instance string               // this instance's name: the Clusters bound to it are its own (binding.go)
	// Instances, when set, is every instance's Lease on the front: placement reads it to
	// decide which instance takes a new Cluster. Nil: this loop is the only instance.
	Instances Instances
	// FormerNames are names this instance had (the host's full name, which an earlier
	// version wrote in status.instance): a Cluster whose status names one is bound here.
	FormerNames []string
	bind        binding
	// owners is which local name's DataDir each Cluster uid owns here (dataDirOwners).
	ownersOnce sync.Once
	owners     *identitystore.Owners
	// MaxBringUps bounds concurrent bring-ups (default 2: each is CPU-heavy).
	MaxBringUps int
	// Adopt takes over, without a restart, the clusters an earlier run left running when
	// they are proven ours and working (Provider.AdoptWith); off, every one is reaped and
	// brought up again. KeepOnExit makes Run's end leave the Ready clusters running for the
	// next run to adopt, rather than stop them. MaxRestartsAtOnce bounds how many adopted
	// clusters that run other than this provider would start them (a pin changed) are
	// restarted at once, each after the one before is Ready again (default 1).
	Adopt             bool
	KeepOnExit        bool
	MaxRestartsAtOnce int
	// MaxRunning, when above 0, is the host guard: at most this many clusters run at once
	// (starting, up, or exited and not yet reaped); the next waits, condition HostFull,
	// until one stops, sleeps or is deleted. Sleeping and parked clusters do not count.
	MaxRunning int
	// Log gets one structured line per decision that acts, and per failure, each with the
	// cluster's namespace/name; nil discards.
	Log *slog.Logger
	// Metrics, when set, are kept up to date.
	Metrics *Metrics
	// Events, when set, records an Event on a Cluster or Node each time what the provider
	// reports of it changes, and on every failed operation (kubectl describe shows them).
	Events    *frontevents.Recorder
	metricsMu sync.Mutex

	queue      workqueue.TypedRateLimitingInterface[string] // Cluster keys
	nodeQueue  workqueue.TypedRateLimitingInterface[string] // Node keys
	lister     cache.GenericLister
	nodeLister cache.GenericLister
	// clusterIndex finds the Clusters of a name; nodeIndex the Nodes of a namespace/cluster.
	clusterIndex, nodeIndex cache.Indexer
	slots                   chan struct{}
	restartSlots            chan struct{} // MaxRestartsAtOnce
	// runCtx is Run's: it ends every bring-up when the provider stops, and bringUps counts
	// them so that Run stops nothing before every bring-up has ended (invariant 26).
	runCtx   context.Context
	bringUps sync.WaitGroup

	// Activity, when set, is the front door's record of each cluster's requests: what
	// deciding that a cluster is idle reads. Without it no cluster sleeps (nothing could
	// wake one).
	Activity Activity
	// SleepAfter is the sleep of a Cluster that sets no spec.sleepAfter; 0: such a
	// cluster never sleeps.
	SleepAfter time.Duration
	// Router, when set, is told the names the front door routes each time the Clusters'
	// spec.extraNames change what they are.
	Router Router
	// names are the front door's names as last decided, and refusedNames each
	// cluster's extra names it does not get, as errors naming the field (syncDoorNames).
	namesMu      sync.Mutex
	names        *frontdoor.Names
	refusedNames map[string][]string

	// OnServing, when set, is called once the loop serves (its informers synced): serve
	// tells systemd it is ready then.
	OnServing func()
	// serving is true from the informers' sync until the stop begins: /readyz.
	serving atomic.Bool

	mu    sync.Mutex
	state map[string]*runState // by namespace/name
	// changed is closed, and replaced, each time a group changes (under mu): what the
	// front door's held connections wait on (Address).
	changed chan struct{}
}

// signalLocked wakes whoever waits on a group change. l.mu is held.
func (l *Loop) signalLocked() {
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// Serving says whether the loop is serving: its informers have synced with the front and
// it is not stopping. It is the provider's readiness (serve's /readyz).
func (l *Loop) Serving() bool { return l.serving.Load() }

// Activity is when a client last sent a cluster a byte, and how many connections to it
// are open (frontdoor.Server); Forget drops what is kept of a cluster that is gone.
type Activity interface {
	Activity(cluster string) (last time.Time, open int)
	Forget(cluster string)
}

// runState is what this provider knows of one cluster's processes.
type runState struct {
	local       string             // the Cluster's local name: the front door's and the provider's
	uid         types.UID          // the Cluster's, whose its DataDir is (ownDataDir)
	phase       materialiser.Phase // as the last pass decided: Address reads it
	lastWake    time.Duration      // how long the last wake took
	upSince     time.Time          // when the group last passed every gate
	wakeSince   time.Time          // when a held connection first asked for a sleeping cluster; zero: none waits
	group       materialiser.Group
	cluster     *Cluster
	attempts    int
	lastAttempt time.Time
	failedStep  string
	reason      string
	everReady   bool
	minted      bool       // created asleep: its identity minted and kubeconfig delivered by this run
	progress    []string   // the bring-up's steps so far, for status: "postgres ready", "kine starting"
	adopting    bool       // the bring-up under way tries adoption first (Observed.Adopting)
	stopping    bool       // an OpStop is stopping its cluster: no stale restart may begin
	np          NodePolicy // the policy of its last bring-up: a restart brings it up again with it
	restarting  *Cluster   // the running cluster a restart is scheduled for (stale, or to read renewed credentials)
	// certsIssued and certsExpire are its status' certificatesIssued and certificatesExpire
	// as this run last read them; nil: not read by this run (the status keeps its own).
	certsIssued, certsExpire *metav1.Time
}

// Run serves until ctx ends, then stops every cluster it runs (their data is kept).
func (l *Loop) Run(ctx context.Context) error {
	if l.Instance == "" {
		return errors.New("clusterprovider: Loop.Instance is empty: it names what is bound to this instance")
	}
	if l.MaxBringUps <= 0 {
		l.MaxBringUps = 2
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	if l.Metrics == nil {
		l.Metrics = NewMetrics()
	}
	l.Metrics.collectUsage(l.usage, l.objects)
	if l.P != nil {
		l.Metrics.collectBackups(l.lastBackups)
	}
	l.slots = make(chan struct{}, l.MaxBringUps)
	if l.MaxRestartsAtOnce <= 0 {
		l.MaxRestartsAtOnce = 1
	}
	l.restartSlots = make(chan struct{}, l.MaxRestartsAtOnce)
	l.mu.Lock() // Address may already be asked (the front door serves beside the loop)
	l.state, l.changed = map[string]*runState{}, make(chan struct{})
	l.mu.Unlock()
	l.runCtx = ctx
	l.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	l.nodeQueue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	f := dynamicinformer.NewDynamicSharedInformerFactory(l.Front, 10*time.Minute)
	clusters, nodes := f.ForResource(ClustersResource), f.ForResource(NodesResource)
	l.lister, l.nodeLister = clusters.Lister(), nodes.Lister()
	handler := func(q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandler {
		enqueue := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	}
	// Indexes, so that a pass reads the Clusters of one name and the Nodes of one cluster,
	// not every object on the front.
	if err := clusters.Informer().AddIndexers(cache.Indexers{byLocal: indexByLocal, byInstance: indexByInstance}); err != nil {
		return err
	}
	if err := nodes.Informer().AddIndexers(cache.Indexers{byCluster: func(obj any) ([]string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, nil
		}
		c, _, _ := unstructured.NestedString(u.Object, "spec", "cluster")
		return []string{u.GetNamespace() + "/" + c}, nil
	}}); err != nil {
		return err
	}
	l.nodeIndex = nodes.Informer().GetIndexer()
	clusters.Informer().AddEventHandler(handler(l.queue))
	nodes.Informer().AddEventHandler(handler(l.nodeQueue))
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), clusters.Informer().HasSynced, nodes.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil // stopped before serving: nothing was started
		}
		return errors.New("front: the Cluster and Node informers did not sync")
	}
	// The Cluster index is set once synced, under mu: Address reads it to tell a name no
	// Cluster has from one whose first pass has not come yet.
	l.mu.Lock()
	l.clusterIndex = clusters.Informer().GetIndexer()
	l.signalLocked()
	l.mu.Unlock()
	l.serving.Store(true)
	if l.OnServing != nil {
		l.OnServing()
	}
	var wg sync.WaitGroup
	if l.P != nil {
		every := l.P.CertificatePolicy().CheckEvery()
		wg.Go(func() { l.renewCertificates(ctx, every) })
	}
	for range 4 {
		wg.Go(func() {
			for work(ctx, l.queue, l.reconcile) {
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for work(ctx, l.nodeQueue, l.reconcileNode) {
			}
		})
	}
	<-ctx.Done()
	l.serving.Store(false)
	l.queue.ShutDown()
	l.nodeQueue.ShutDown()
	wg.Wait()
	// Every worker has returned, so no bring-up can begin now; those under way see ctx end,
	// and their Spawn reaps what it started. Only then are the running groups stopped (or,
	// with KeepOnExit, let go of): a group half brought up is never left behind.
	l.bringUps.Wait()
	if l.KeepOnExit {
		l.detachAll()
		return nil
	}
	return l.stopAll()
}

// detachAll lets go of every running cluster and leaves it running (Cluster.Detach), for
// the next run to adopt. A cluster whose component exited is stopped instead: it is not
// whole, and the next run would only reap it.
func (l *Loop) detachAll() {
	l.mu.Lock()
	var keep, stop []*Cluster
	for _, st := range l.state {
		switch {
		case st.cluster == nil:
		case st.group == materialiser.GroupUp:
			keep = append(keep, st.cluster)
		default:
			stop = append(stop, st.cluster)
		}
	}
	l.mu.Unlock()
	for _, c := range keep {
		c.Detach()
	}
	parallel.Each(stopsAtOnce, stop, func(c *Cluster) error { return c.Stop() })
	l.Log.Info("stopping; the clusters keep running for the next run to adopt", "kept", len(keep), "stopped", len(stop))
}

// work takes one key from q and reconciles it: an error retries with backoff, a requeue
// looks again after it.
func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], reconcile func(context.Context, string) (time.Duration, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	requeue, err := reconcile(ctx, key)
	switch {
	case err != nil:
		q.AddRateLimited(key)
	case requeue > 0:
		q.Forget(key)
		q.AddAfter(key, requeue)
	default:
		q.Forget(key)
	}
	return true
}

// stepProgress adds one step event to a bring-up's progress: a step that starts is added,
// one that is ready replaces its "starting", so that the message reads
// "postgres ready, kine ready, kube-control-plane starting".
func stepProgress(p []string, step, phase string) []string {
	p = slices.DeleteFunc(slices.Clone(p), func(s string) bool { return s == step+" starting" })
	return append(p, step+" "+phase)
}

// StepEvent is the provider's Config.OnEvent: a bring-up's step progress, shown in its
// Cluster's Ready condition so that a watcher (socialweb-kcp up) sees each step pass.
func (l *Loop) StepEvent(cluster string, e procgroup.Event) {
	if e.Phase != "starting" && e.Phase != "ready" {
		return
	}
	l.mu.Lock()
	var keys []string
	for key, st := range l.state {
		if st.local == cluster && st.group == materialiser.GroupStarting { // cluster: the local name
			st.progress = stepProgress(st.progress, e.Step.String(), e.Phase)
			keys = append(keys, key)
		}
	}
	l.mu.Unlock()
	for _, k := range keys {
		l.queue.Add(k)
	}
}

// stopAll stops every group this provider runs, a few at once (each stop is mostly waiting
// for processes to exit), and waits for all of them.
func (l *Loop) stopAll() error {
	l.mu.Lock()
	var running []*Cluster
	for _, st := range l.state {
		if st.cluster != nil {
			running = append(running, st.cluster)
		}
	}
	l.mu.Unlock()
	return parallel.Each(stopsAtOnce, running, func(c *Cluster) error {
		if err := c.Stop(); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		return nil
	})
}

// indexByLocal indexes Clusters by local name: the front door and the provider find them
// by it.
func indexByLocal(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return []string{localName(m)}, nil
}

// stopsAtOnce bounds the groups a stopping provider reaps at once.
const stopsAtOnce = 8

func (l *Loop) st(key string) *runState {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state[key] == nil {
		l.state[key] = &runState{group: materialiser.GroupAbsent}
	}
	return l.state[key]
}

// forget drops what the loop and the front door keep of a Cluster that is gone, once no
// process of it runs: the front door then answers its name as no cluster's, and its
// series leave /metrics. A Cluster whose finalizer was removed by hand while its group ran
// keeps its state, so that the stop still finds the group.
func (l *Loop) forget(key string) {
	l.mu.Lock()
	st := l.state[key]
	idle := st != nil && (st.group == materialiser.GroupAbsent || st.group == materialiser.GroupFailed)
	if idle {
		delete(l.state, key)
	}
	l.mu.Unlock()
	if idle && st.local != "" && l.Activity != nil {
		l.Activity.Forget(st.local) // the front door knows a cluster by its local name
	}
}

// reconcile observes one Cluster, asks the phase machine, performs its operations in
// order, and writes the status.
func (l *Loop) reconcile(ctx context.Context, key string) (time.Duration, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	obj, err := l.lister.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		l.observePhase(key, "", 0)
		l.forget(key)
		return 0, nil // gone: its finalizer saw to the teardown
	}
	if err != nil {
		return 0, err
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	var cl v1alpha1.Cluster
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cl); err != nil {
		return 0, err
	}
	if b := boundTo(u); b != "" && b != l.Instance {
		return l.boundElsewhere(ctx, u, &cl, b) // another instance's: it alone touches it
	}
	if boundTo(u) == "" {
		return l.place(ctx, u, &cl)
	}
	if _, ok := u.GetAnnotations()[v1alpha1.LocalNameAnnotation]; !ok {
		// Bound by a provider from before local names: everything it has carries its bare
		// name, which it keeps, recorded before anything else is done (the write's event
		// brings the next pass).
		return 0, l.recordLocalName(ctx, u)
	}
	st := l.st(key)
	// Recorded once, never changed: a name changed by hand is set back to the one its
	// processes and DataDir here carry; a name that is another Cluster's is refused.
	known := l.knownLocalName(&cl, st)
	if known != "" && known != localName(&cl) {
		return 0, l.restoreLocalName(ctx, u, known)
	}
	if !l.claimLocalName(&cl, known) {
		return 0, l.refuseLocalName(ctx, &cl)
	}
	l.syncDoorNames()
	l.mu.Lock()
	st.local, st.uid = localName(&cl), cl.UID
	l.mu.Unlock()
	o, err := l.observe(ctx, &cl, st)
	if err != nil {
		return 0, err
	}
	r := materialiser.Reconcile(o)
	// Before any operation: a connection that comes for a cluster falling asleep from
	// now on is held for its wake, not piped to processes about to stop (Address).
	l.mu.Lock()
	if st.phase != r.Phase {
		l.signalLocked() // a connection held for this Cluster's first pass (Address) looks again
	}
	st.phase = r.Phase
	if r.Phase != materialiser.PhaseSleeping {
		st.wakeSince = time.Time{} // parked, deleted, or up: no wake is pending any more
	}
	l.mu.Unlock()
	log := l.Log.With("cluster", key)
	if len(r.Ops) > 0 || string(r.Phase) != cl.Status.Phase {
		log.Info("reconcile", "phase", r.Phase, "reason", r.Ready.Reason, "ops", r.Ops, "group", o.Group, "nodes", o.Nodes)
	}
	// The status first, so that a watcher sees what is being done while it lasts.
	if !slices.Contains(r.Ops, materialiser.OpRemoveFinalizer) {
		l.writeStatus(ctx, &cl, st, o.Nodes, r, nil)
	}
	for _, op := range r.Ops {
		err := l.perform(ctx, op, &cl, st)
		if errors.Is(err, errHostFull) {
			// Another cluster took the last room since this pass observed: the next
			// pass says HostFull.
			log.Info("host full; looking again", "op", string(op))
			return materialiser.HostFullRecheck, nil
		}
		if errors.Is(err, errBringUpUnderWay) {
			// Not a failure and nothing to poll: the bring-up enqueues this key when it
			// ends, and the stop goes then. (Returned as an error, it was retried at every
			// status event of the bring-up, each pass a status write and a log line.)
			log.Debug("waiting for the bring-up under way before stopping", "op", string(op))
			return 0, nil
		}
		if err != nil {
			l.failed(log, clusterObject(&cl), "operation failed", op, err)
			l.writeStatus(ctx, &cl, st, o.Nodes, r, fmt.Errorf("%s: %w", op, err))
			return 0, err
		}
	}
	if slices.Contains(r.Ops, materialiser.OpRemoveFinalizer) {
		return 0, nil // the object goes
	}
	l.mu.Lock()
	c, up := st.cluster, st.group == materialiser.GroupUp
	l.mu.Unlock()
	if up && c != nil {
		// An extra name given while it runs: the certificate is minted again and the
		// apiserver reloads it; a bring-up mints with the names of its time.
		if minted, err := c.EnsureServingNames(); err != nil {
			log.Warn("serving certificate not minted for the front door's names; retried", "err", err)
			return 0, err
		} else if minted {
			log.Info("serving certificate minted again for the front door's names", "names", c.doorNames)
		}
	}
	l.observePhase(key, r.Phase, o.Nodes)
	l.enqueueNodesOf(ns, name)
	// An operation changed the world, not the object: look again now. (A bring-up
	// enqueues the key itself when it ends.)
	if len(r.Ops) > 0 && !slices.Contains(r.Ops, materialiser.OpBringUp) && r.Requeue == 0 {
		r.Requeue = 10 * time.Millisecond
	}
	return r.Requeue, nil
}

func (l *Loop) observe(ctx context.Context, cl *v1alpha1.Cluster, st *runState) (materialiser.Observed, error) {
	l.mu.Lock()
	o := materialiser.Observed{
		Now: time.Now(), Running: cl.Spec.Running == nil || *cl.Spec.Running,
		Deleting: cl.DeletionTimestamp != nil, HasFinalizer: slices.Contains(cl.Finalizers, v1alpha1.TeardownFinalizer),
		Phase: materialiser.Phase(cl.Status.Phase),
		// A cluster that was Ready under an earlier run of the provider comes back as
		// Unavailable, not Initializing.
		EverReady: st.everReady || cl.Status.Phase == v1alpha1.PhaseReady || cl.Status.Phase == v1alpha1.PhaseUnavailable || cl.Status.Phase == v1alpha1.PhaseSleeping,
		Group:     st.group, FailedStep: st.failedStep, FailedReason: st.reason, Attempts: st.attempts, LastAttempt: st.lastAttempt,
		UpSince: st.upSince, WakeRequested: !st.wakeSince.IsZero(), Minted: st.minted,
		MaxRunning: l.MaxRunning, RunningElsewhere: l.runningElsewhereLocked(st),
	}
	c := st.cluster
	l.mu.Unlock()
	if l.Activity != nil {
		o.SleepAfter = l.SleepAfter
		if cl.Spec.SleepAfter != nil {
			o.SleepAfter = cl.Spec.SleepAfter.Duration
		}
		o.LastActive, o.Connections = l.Activity.Activity(localName(cl))
		o.CreateAsleep = cl.Spec.CreateAsleep
		o.Datastore = l.P.HasDatastore(localName(cl))
		if cl.Spec.Datastore == v1alpha1.DatastoreExternal {
			// Its datastore is on the server, made at its first bring-up on any instance:
			// it is never created asleep (which mints an identity here, without a look at
			// the one the front keeps).
			o.CreateAsleep, o.Datastore = false, true
		}
		// A real guest keeps its cluster awake: its kubelet and pods would lose their
		// apiserver. Simulated ones do not.
		o.RealNodes = realGuestCount(l.P.DataDir(localName(cl)))
	}
	dir := l.P.DataDir(localName(cl))
	_, err := os.Stat(dir)
	o.DataDirExists = err == nil
	o.LeaseHeld = l.leaseOf(localName(cl)) != 0
	l.mu.Lock()
	o.Adopting = l.Adopt && o.LeaseHeld && st.attempts == 0 &&
		(st.group == materialiser.GroupAbsent && st.cluster == nil || st.group == materialiser.GroupStarting && st.adopting)
	l.mu.Unlock()
	if c != nil {
		if list, err := c.Instances(); err == nil {
			o.Nodes = len(list)
		} else {
			return o, err // an unreadable snapshot is an error, never zero nodes (invariant 14)
		}
	}
	if !o.Deleting {
		return o, nil // the Secret matters only to a teardown: no read on every other pass
	}
	_, err = l.Core.CoreV1().Secrets(cl.Namespace).Get(ctx, kubeconfigSecret(cl.Name), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return o, err
	}
	o.KubeconfigSet = err == nil
	return o, nil
}

// releaseLease releases the port cluster name holds here, if it holds one.
func (l *Loop) releaseLease(name string) error {
	if port := l.leaseOf(name); port != 0 {
		return l.P.Leases().Release(port, leaseHolder(clusterstack.Spec{Name: name}))
	}
	return nil
}

func (l *Loop) leaseOf(name string) int {
	for _, ls := range l.P.Leases().Leases() {
		if ls.Holder == leaseHolder(clusterstack.Spec{Name: name}) {
			return ls.Port
		}
	}
	return 0
}

func kubeconfigSecret(cluster string) string { return cluster + "-kubeconfig" }

func (l *Loop) observePhase(key string, p materialiser.Phase, nodes int) {
	l.metricsMu.Lock()
	defer l.metricsMu.Unlock()
	l.Metrics.setPhase(key, p)
	if p != "" {
		l.Metrics.nodes.WithLabelValues(key).Set(float64(nodes))
	}
}

func (l *Loop) perform(ctx context.Context, op materialiser.Op, cl *v1alpha1.Cluster, st *runState) error {
	key := cl.Namespace + "/" + cl.Name
	switch op {
	case materialiser.OpAddFinalizer, materialiser.OpRemoveFinalizer:
		if op == materialiser.OpRemoveFinalizer {
			// A restore staged for a Cluster that never ran has no DataDir to go with: it
			// goes here, or a later Cluster of the name would come up from it.
			if err := l.P.DropRestore(localName(cl)); err != nil {
				return err
			}
			// An external datastore outlives any host: it goes with its Cluster, last,
			// once nothing runs that could write to it.
			if cl.Spec.Datastore == v1alpha1.DatastoreExternal {
				if err := l.P.DropExternal(ctx, string(cl.UID)); err != nil {
					return err
				}
				if err := l.deleteIdentity(ctx, cl); err != nil {
					return err
				}
			}
		}
		return l.setFinalizer(ctx, ClustersResource, &cl.ObjectMeta, v1alpha1.TeardownFinalizer, op == materialiser.OpAddFinalizer, nil)
	case materialiser.OpBringUp:
		l.mu.Lock()
		// The count again, under the lock that marks this one starting: two passes that
		// each saw room for one must not both take it.
		if n := l.runningElsewhereLocked(st); l.MaxRunning > 0 && n >= l.MaxRunning {
			l.mu.Unlock()
			return errHostFull
		}
		st.group, st.lastAttempt, st.progress, st.np = materialiser.GroupStarting, time.Now(), nil, policyOf(cl)
		adopt := l.Adopt && l.leaseOf(localName(cl)) != 0 // nothing runs of a cluster that holds no port
		st.adopting = adopt
		l.signalLocked()
		l.mu.Unlock()
		l.bringUps.Add(1)
		go l.bringUp(key, localName(cl), policyOf(cl), adopt)
		return nil
	case materialiser.OpStop:
		l.mu.Lock()
		c, starting := st.cluster, st.group == materialiser.GroupStarting
		if !starting {
			st.stopping = true
		}
		l.mu.Unlock()
		if starting {
			// Its lease and DataDir are in use: nothing further may go until the
			// bring-up has ended and can be reaped.
			return errBringUpUnderWay
		}
		defer func() {
			l.mu.Lock()
			st.stopping = false
			l.mu.Unlock()
		}()
		if c != nil {
			t0 := time.Now()
			if err := c.Stop(); err != nil {
				return err
			}
			l.Metrics.teardown.Observe(time.Since(t0).Seconds())
		}
		l.mu.Lock()
		st.cluster, st.group = nil, materialiser.GroupAbsent
		l.signalLocked()
		l.mu.Unlock()
		return nil
	case materialiser.OpRemoveNodes:
		l.mu.Lock()
		c := st.cluster
		l.mu.Unlock()
		if c == nil {
			return errors.New("nodes are listed but the cluster does not run here")
		}
		list, err := c.Instances()
		if err != nil {
			return err
		}
		// A few at a time, each drained, deleted and unlisted; no wait for the CCM to delete
		// the Node, which goes with the cluster's data.
		return parallel.Each(removeNodesAtOnce, list, func(in instancesnapshot.Instance) error {
			_, err := c.retireGuest(ctx, in.NodeID)
			return err
		})
	case materialiser.OpMint:
		m, err := l.P.Mint(localName(cl))
		if err != nil {
			return err
		}
		if err := l.deliverKubeconfig(ctx, cl.Name, m.TenantKubeconfig, cl.Namespace); err != nil {
			return err
		}
		l.mu.Lock()
		st.minted = true
		l.mu.Unlock()
		l.recordCertificates(cl.Namespace+"/"+cl.Name, l.P.DataDir(localName(cl)))
		return nil
	case materialiser.OpReapSurvivors:
		return l.P.ReapSurvivorsOf(localName(cl))
	case materialiser.OpReleaseLease:
		return l.releaseLease(localName(cl))
	case materialiser.OpRemoveDataDir:
		return l.P.RemoveDataDir(localName(cl))
	case materialiser.OpDeleteKubeconfig:
		err := l.Core.CoreV1().Secrets(cl.Namespace).Delete(ctx, kubeconfigSecret(cl.Name), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return fmt.Errorf("unknown operation %s", op)
}

// bringUp runs one bring-up (in a slot), delivers the kubeconfig, and watches for an exit.
// With adopt it first tries to take the cluster over as an earlier run left it running,
// which needs no slot: nothing starts. It ends with the provider: a bring-up cut short
// reaps what it started. key is the Cluster's namespace/name, local its local name.
func (l *Loop) bringUp(key, local string, np NodePolicy, adopt bool) {
	defer l.bringUps.Done()
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	log := l.Log.With("cluster", key)
	st := l.st(key)
	// absent ends a bring-up that started nothing: the provider is stopping.
	absent := func() {
		l.mu.Lock()
		st.group, st.adopting = materialiser.GroupAbsent, false
		l.signalLocked()
		l.mu.Unlock()
	}
	var c *Cluster
	var err error
	if adopt {
		t0 := time.Now()
		actx, cancel := context.WithTimeout(l.runCtx, bringUpDeadline)
		c, err = l.P.AdoptWith(actx, local, np)
		cancel()
		if err == nil {
			_, stale := c.Adopted()
			state := "current"
			if len(stale) > 0 {
				state = "stale"
			}
			l.Metrics.adopted.WithLabelValues(state).Inc()
			log.Info("adopted: its processes run on, untouched", "took", time.Since(t0).Round(time.Millisecond), "stale", stale)
		} else {
			if l.runCtx.Err() != nil {
				// Stopping while it proved the group: what runs is left as it is, for the
				// stop to keep or reap, never reaped by a bring-up now.
				absent()
				return
			}
			if !errors.Is(err, errNothingToAdopt) {
				log.Info("not adopted; bringing it up", "why", err)
			}
			c = nil
			l.mu.Lock()
			st.adopting = false
			l.mu.Unlock()
			l.queue.Add(key) // its status says what comes now
		}
	}
	ctx, cancel := context.WithTimeout(l.runCtx, bringUpDeadline)
	defer cancel()
	if c == nil {
		if l.runCtx.Err() != nil {
			absent()
			return
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.runCtx.Done():
			absent() // nothing started
			return
		}
		t0 := time.Now()
		err = l.carryIdentity(ctx, ns, name, local, np)
		if err == nil {
			c, err = l.P.UpWith(ctx, local, np)
		}
		<-l.slots
		if err == nil {
			l.Metrics.bringUp.Observe(time.Since(t0).Seconds())
		}
	}
	if err == nil {
		if derr := l.deliverKubeconfigRetrying(ctx, name, c.TenantKubeconfig, ns); derr != nil {
			if adopted, _ := c.Adopted(); adopted {
				// It serves, and the earlier run delivered its kubeconfig: a failed
				// delivery is retried at its next start, not paid for with an outage.
				log.Warn("kubeconfig not delivered again; the adopted cluster runs on", "err", derr)
			} else {
				c.Stop()
				err = derr
			}
		}
	}
	if err == nil {
		l.recordCertificates(key, c.DataDir)
		l.mu.Lock()
		uid := st.uid
		l.mu.Unlock()
		l.ownDataDir(c, uid)
	}
	l.mu.Lock()
	st.adopting = false // with the group's new state, under one lock: no pass between sees neither
	if err != nil {
		st.wakeSince = time.Time{} // the held connections are refused: a failed wake is not retried for them
		st.group, st.attempts, st.reason, st.failedStep = materialiser.GroupFailed, st.attempts+1, err.Error(), "bring-up"
		if se := (*procgroup.StepError)(nil); errors.As(err, &se) {
			st.failedStep = se.Step.String()
		}
	} else {
		st.group, st.cluster, st.attempts, st.everReady, st.failedStep, st.reason = materialiser.GroupUp, c, 0, true, "", ""
		st.upSince, st.phase = time.Now(), materialiser.PhaseReady // until the next pass: not "falling asleep" to Address
		if !st.wakeSince.IsZero() {
			st.lastWake, st.wakeSince = st.upSince.Sub(st.wakeSince), time.Time{}
			l.Metrics.wake.Observe(st.lastWake.Seconds())
		}
		go func() {
			select {
			case ex := <-c.Exited():
				l.mu.Lock()
				if st.cluster == c {
					st.group, st.failedStep, st.reason, st.attempts = materialiser.GroupExited, ex.Step.String(), fmt.Sprint(ex.Err), st.attempts+1
					l.Metrics.restarts.WithLabelValues(ex.Step.String()).Inc()
					l.signalLocked()
				}
				l.mu.Unlock()
				l.queue.Add(key)
			case <-c.stopping:
			}
		}()
		if _, stale := c.Adopted(); len(stale) > 0 {
			st.restarting = c
			l.bringUps.Add(1)
			go l.restart(key, np, c, "restarting to run what this provider runs", stale)
		}
	}
	l.signalLocked()
	l.mu.Unlock()
	l.queue.Add(key)
}

// restart restarts a running cluster: one adopted stale (its processes run another binary,
// argv or credentials than this provider would start them with: an upgrade), or one whose
// certificates are to be renewed (renewCertificates). At most MaxRestartsAtOnce run at a
// time: each waits for a restart slot, and a slot is freed only once its cluster is Ready
// again or its bring-up failed. Until its turn the cluster serves as it is. The turn is
// given up if the cluster was stopped, exited or changed hands meanwhile.
func (l *Loop) restart(key string, np NodePolicy, c *Cluster, msg string, why []string) {
	defer l.bringUps.Done()
	st := l.st(key)
	giveUp := func() {
		if st.restarting == c {
			st.restarting = nil
		}
		l.mu.Unlock()
	}
	select {
	case l.restartSlots <- struct{}{}:
	case <-l.runCtx.Done():
		l.mu.Lock()
		giveUp()
		return
	}
	defer func() { <-l.restartSlots }()
	l.mu.Lock()
	// A slot free as the provider stops is no reason to stop a cluster it keeps or stops
	// itself (select picks either when both are ready).
	if st.cluster != c || st.group != materialiser.GroupUp || st.stopping || l.runCtx.Err() != nil {
		giveUp()
		return
	}
	st.group, st.cluster, st.progress, st.lastAttempt, st.restarting = materialiser.GroupStarting, nil, nil, time.Now(), nil
	l.signalLocked()
	l.mu.Unlock()
	l.Log.Info(msg, "cluster", key, "why", why)
	l.queue.Add(key)
	if err := c.StopToRestart(); err != nil {
		l.mu.Lock()
		st.group, st.attempts, st.reason, st.failedStep = materialiser.GroupFailed, st.attempts+1, err.Error(), "restart"
		l.signalLocked()
		l.mu.Unlock()
		l.queue.Add(key)
		return
	}
	l.bringUps.Add(1)
	l.bringUp(key, c.Name, np, false) // c.Name: its local name
}

// renewCertificates looks at every Ready cluster's certificates as often as the policy
// says (certrenewal.Policy.CheckEvery) and restarts, one at a time, each whose leaves fell
// due, whose renewal was requested, or whose credentials changed on disk
// (Cluster.RenewalDue). It ends with ctx.
func (l *Loop) renewCertificates(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			l.renewDue(now)
		}
	}
}

func (l *Loop) renewDue(now time.Time) {
	type running struct {
		key string
		c   *Cluster
	}
	var up []running
	l.mu.Lock()
	for key, st := range l.state {
		if st.group == materialiser.GroupUp && st.cluster != nil && !st.stopping && st.restarting != st.cluster {
			up = append(up, running{key, st.cluster})
		}
	}
	l.mu.Unlock()
	for _, r := range up {
		why, err := r.c.RenewalDue(now)
		if err != nil {
			l.Log.Error("certificate renewal", "cluster", r.key, "err", err)
			continue
		}
		if len(why) == 0 {
			continue
		}
		st := l.st(r.key)
		l.mu.Lock()
		if st.cluster != r.c || st.group != materialiser.GroupUp || st.stopping || st.restarting == r.c {
			l.mu.Unlock()
			continue
		}
		st.restarting = r.c
		np := st.np
		l.bringUps.Add(1)
		l.mu.Unlock()
		go l.restart(r.key, np, r.c, "restarting to renew its certificates", why)
	}
}

// failed reports a failed operation on obj: at ERROR with a Warning Event on obj, unless
// it is an expected condition that the next pass retries by design (a conflict on an
// optimistic-concurrency write, a stopping provider), which is news, not a fault: an INFO
// line and no Event.
func (l *Loop) failed(log *slog.Logger, obj frontevents.Object, msg string, op materialiser.Op, err error) {
	if expected(err) {
		log.Info(msg+"; retrying", "op", string(op), "err", err)
		return
	}
	log.Error(msg, "op", string(op), "err", err)
	l.Events.Record(obj, frontevents.OperationFailed(string(op), err))
}

func expected(err error) bool {
	return apierrors.IsConflict(err) || errors.Is(err, context.Canceled)
}

// removeNodesAtOnce bounds the guests a teardown removes at once.
const removeNodesAtOnce = 8

// errBringUpUnderWay: a stop must wait for the bring-up that is running to end; the
// reconcile ends there, and the bring-up's end enqueues the key again.
var errBringUpUnderWay = errors.New("a bring-up is under way; stopping once it ends")

// errHostFull: the host guard's cap was reached between a pass's observation and its
// bring-up.
var errHostFull = errors.New("host full")

// runningElsewhereLocked counts the clusters other than st's that run on this provider:
// the host guard's measure. l.mu is held.
func (l *Loop) runningElsewhereLocked(st *runState) int {
	n := 0
	for _, other := range l.state {
		if other != st && (other.group == materialiser.GroupStarting || other.group == materialiser.GroupUp || other.group == materialiser.GroupExited) {
			n++
		}
	}
	return n
}

// bringUpDeadline parks a bring-up that has not passed every gate by then as failed.
const bringUpDeadline = 3 * time.Minute

// recordCertificates puts when the cluster's leaves were minted and when the soonest
// expires in its status and the metrics. A certificate that cannot be read is logged, not
// fatal: the cluster runs, and the next start mints what is unreadable.
func (l *Loop) recordCertificates(key, dataDir string) {
	certs, err := certrenewal.Inventory(dataDir)
	if err != nil {
		certs = nil
		l.Log.Warn("certificate inventory", "cluster", key, "err", err)
	}
	l.metricsMu.Lock()
	l.Metrics.setCertificates(key, certs)
	l.metricsMu.Unlock()
	var issued, expire *metav1.Time
	if t, ok := certrenewal.Issued(certs); ok {
		issued = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	if c, ok := certrenewal.SoonestLeaf(certs); ok {
		expire = &metav1.Time{Time: c.NotAfter.Truncate(time.Second)}
	}
	st := l.st(key)
	l.mu.Lock()
	st.certsIssued, st.certsExpire = issued, expire
	l.mu.Unlock()
}

// deliverKubeconfigRetrying delivers the kubeconfig of a cluster just brought up, trying
// again for up to deliverFor while the front does not answer: the front restarts too, to
// renew its own certificates, and a cluster Ready meanwhile is not stopped for that.
func (l *Loop) deliverKubeconfigRetrying(ctx context.Context, cluster, path, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, deliverFor)
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		err := l.deliverKubeconfig(ctx, cluster, path, ns)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// deliverFor is how long a bring-up tries to deliver its kubeconfig: longer than the front
// takes to restart (about 13 s, most of it its apiserver's graceful stop).
const deliverFor = time.Minute

// deliverKubeconfig writes the tenant kubeconfig at path into the <cluster>-kubeconfig
// Secret in ns.
func (l *Loop) deliverKubeconfig(ctx context.Context, cluster, path, ns string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: kubeconfigSecret(cluster), Namespace: ns, Labels: managedBy},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"kubeconfig": b},
	}
	_, err = l.Core.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = l.Core.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{})
	}
	return err
}

// writeStatus writes r and, for a Ready cluster, its URL and the nodes observed this pass.
func (l *Loop) writeStatus(ctx context.Context, cl *v1alpha1.Cluster, st *runState, nodes int, r materialiser.Result, opErr error) {
	l.mu.Lock()
	c, lastWake, upSince, issued, expire := st.cluster, st.lastWake, st.upSince, st.certsIssued, st.certsExpire
	var progress []string
	if st.group == materialiser.GroupStarting {
		progress = st.progress
	}
	l.mu.Unlock()
	instance := "" // a Cluster no instance took yet (refused its name) is no instance's
	if cl.Labels[v1alpha1.InstanceLabel] == l.Instance {
		instance = l.Instance
	}
	status := v1alpha1.ClusterStatus{Phase: string(r.Phase), Instance: instance, Conditions: slices.Clone(cl.Status.Conditions),
		LastActive: cl.Status.LastActive, LastWake: cl.Status.LastWake,
		CertificatesIssued: cl.Status.CertificatesIssued, CertificatesExpire: cl.Status.CertificatesExpire}
	if issued != nil {
		status.CertificatesIssued, status.CertificatesExpire = issued, expire
	}
	if lastWake > 0 {
		status.LastWake = lastWake.Round(10 * time.Millisecond).String()
	}
	if r.Phase == materialiser.PhaseSleeping && cl.Status.Phase != v1alpha1.PhaseSleeping && l.Activity != nil {
		last, _ := l.Activity.Activity(localName(cl))
		if up := upSince; up.After(last) {
			last = up
		}
		if !last.IsZero() { // a cluster created asleep was never active
			status.LastActive = &metav1.Time{Time: last.Truncate(time.Second)}
		}
	}
	switch {
	case r.Phase != materialiser.PhaseReady:
	case c != nil:
		status.URL = c.URL
		status.Nodes = int32(nodes)
	default:
		// Ready with no group in hand: a restarted provider adopting it, or a restart
		// (renewal, upgrade) that began after this pass observed. Either way it runs, or
		// comes back, at its leased port: the URL it had stays (a Ready status without
		// one sent a client reading it nowhere).
		status.URL, status.Nodes = cl.Status.URL, cl.Status.Nodes
	}
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: r.Ready.Reason, Message: r.Ready.Message, ObservedGeneration: cl.Generation}
	if r.Ready.Status {
		cond.Status = metav1.ConditionTrue
	}
	if opErr != nil {
		cond.Message += "; " + opErr.Error()
	}
	if len(progress) > 0 {
		cond.Message += ": " + strings.Join(progress, ", ")
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	l.extraNamesCondition(&status.Conditions, localName(cl), cl.Spec.ExtraNames, cl.Generation)
	if equalStatus(cl.Status, status) {
		return
	}
	was := ""
	if c := meta.FindStatusCondition(cl.Status.Conditions, "Ready"); c != nil {
		was = c.Reason
	}
	cl.Status = status
	written, err := l.updateStatus(ctx, ClustersResource, cl, &cl.ObjectMeta)
	if err != nil {
		l.Log.Warn("status not written", "cluster", cl.Namespace+"/"+cl.Name, "err", err)
	}
	if !written {
		return // the next pass writes it, and records the change then
	}
	if e, ok := frontevents.ForCluster(cl.Name, was, r.Ready.Reason, r.Ready.Message); ok {
		l.Events.Record(clusterObject(cl), e)
	}
}

func clusterObject(cl *v1alpha1.Cluster) frontevents.Object {
	return frontevents.Object{Kind: "Cluster", Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}
}

// updateStatus writes obj's status through the status subresource of res, takes the new
// resourceVersion into m, since the finalizer patch that may follow is guarded by it, and
// says whether it wrote. A conflict or a vanished object is no news (not written, no
// error): the event it made brings the next pass.
func (l *Loop) updateStatus(ctx context.Context, res schema.GroupVersionResource, obj any, m *metav1.ObjectMeta) (bool, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false, err
	}
	got, err := l.Front.Resource(res).Namespace(m.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	switch {
	case err == nil:
		m.ResourceVersion = got.GetResourceVersion()
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// setFinalizer adds finalizer to the object m of res, or removes it, with more metadata
// when given; guarded by m's resourceVersion. Removing it from an object already gone is done.
func (l *Loop) setFinalizer(ctx context.Context, res schema.GroupVersionResource, m *metav1.ObjectMeta, finalizer string, add bool, more map[string]any) error {
	fins := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == finalizer })
	if add {
		fins = append(fins, finalizer)
	}
	md := map[string]any{"finalizers": fins, "resourceVersion": m.ResourceVersion}
	maps.Copy(md, more)
	patch, _ := json.Marshal(map[string]any{"metadata": md})
	_, err := l.Front.Resource(res).Namespace(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if !add && apierrors.IsNotFound(err) {
		return nil // already gone: an earlier pass removed it and the cache lagged
	}
	return err
}

func equalStatus(a, b v1alpha1.ClusterStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// PolicyOf is a Cluster's own policy as its spec gives it. Its resource quantities passed
// the front's schema; one that still does not parse is left to the provider's default.
func PolicyOf(spec v1alpha1.ClusterSpec) NodePolicy {
	np := NodePolicy{MaxNodes: int(spec.MaxNodes), PodsPerNode: int(spec.PodsPerNode)}
	if r := spec.Resources; r != nil {
		np.Resources.MemoryBytes, _ = cgroups.ParseMemory(r.Memory)
		np.Resources.MilliCPU, _ = cgroups.ParseCPU(r.CPU)
		np.Resources.Pids = r.Pids
		np.Objects = r.Objects
	}
	return np
}

// policyOf is a Cluster's policy with where its datastore is.
func policyOf(cl *v1alpha1.Cluster) NodePolicy {
	np := PolicyOf(cl.Spec)
	if cl.Spec.Datastore == v1alpha1.DatastoreExternal {
		np.ExternalUID = string(cl.UID)
		np.ExternalEpoch = epochOf(cl.GetAnnotations())
	}
	return np
}

// runningClusters is each running cluster, by key.
func (l *Loop) runningClusters() map[string]*Cluster {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]*Cluster{}
	for key, st := range l.state {
		if st.cluster != nil {
			out[key] = st.cluster
		}
	}
	return out
}

// lastBackups is when each cluster this run knows was last backed up, by key; a record
// that cannot be read is left out (the operator's backup command said why when it ran).
func (l *Loop) lastBackups() map[string]time.Time {
	l.mu.Lock()
	locals := map[string]string{}
	for key, st := range l.state {
		locals[key] = st.local
	}
	l.mu.Unlock()
	out := map[string]time.Time{}
	for key, local := range locals {
		if local == "" {
			continue // no pass has run yet
		}
		r, ok, err := backup.ReadRecord(clusterstack.Layout{Root: l.P.DataDir(local)}.LastBackup())
		if ok && err == nil {
			out[key] = r.Time
		}
	}
	return out
}

// objects is each running cluster's stored objects at its last count, by key.
func (l *Loop) objects() map[string]int64 {
	out := map[string]int64{}
	for key, c := range l.runningClusters() {
		out[key] = c.Objects()
	}
	return out
}

// usage is each running cluster's control-group usage, by key (none without cgroups).
func (l *Loop) usage() map[string]cgroups.Usage {
	running := l.runningClusters()
	out := map[string]cgroups.Usage{}
	for key, c := range running {
		if u, ok := c.Usage(); ok {
			out[key] = u
		}
	}
	return out
}
