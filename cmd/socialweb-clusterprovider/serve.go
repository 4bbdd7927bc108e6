package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/frontevents"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/sdnotify"
)

// serveOptions are serve's flags.
type serveOptions struct {
	*providerFlags
	frontKubeconfig, logFormat, metricsAddr string
	maxBringUps, maxRunning                 int
	// A restart of the provider: what its stop leaves, whether a start adopts it, and how
	// many adopted clusters an upgrade restarts at once.
	onExit      string
	adopt       bool
	maxRestarts int
	// The front door: one listener for every tenant apiserver, routed by TLS server name.
	frontDoorAddr, baseDomain string
	frontDoorPort             int
	sleepAfter                time.Duration
	// Many instances on one front: this one's name and how many Clusters it takes.
	instance, capacity string
	// externalDatastore is the file naming the shared PostgreSQL server of clusters whose
	// spec.datastore is external.
	externalDatastore string
}

func serveCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Make the Clusters and Nodes declared on a front real, until SIGINT or SIGTERM",
		Args: func(_ *cobra.Command, a []string) error {
			if len(a) > 0 {
				return fmt.Errorf("serve takes no arguments (got %q)", a)
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return serve(o, stdout, stderr) },
	}
	fs := cmd.Flags()
	o.providerFlags = addProviderFlags(fs)
	fs.StringVar(&o.frontKubeconfig, "front-kubeconfig", "", "use this Kubernetes API as the front instead of running one")
	fs.IntVar(&o.maxBringUps, "max-bring-ups", 2, "bring-ups run at once")
	fs.StringVar(&o.onExit, "on-exit", "stop", "what SIGINT or SIGTERM does with the running clusters: stop (every process stopped, data kept) or keep (Ready clusters, and the front, left running for the next serve to adopt: a restart or an upgrade of the provider that its tenants do not see)")
	fs.BoolVar(&o.adopt, "adopt", true, "take over the clusters an earlier serve left running, when every process of each is proven its own and passes its gate, instead of restarting them")
	fs.IntVar(&o.maxRestarts, "max-restarts-at-once", 1, "adopted clusters whose binaries, flags or credentials changed (an upgrade) are restarted this many at a time, each after the one before is Ready again")
	fs.IntVar(&o.maxRunning, "max-running-clusters", 0, "at most this many clusters run at once (sleeping and parked ones do not count); the next waits with condition HostFull until one stops. 0: no cap")
	fs.StringVar(&o.logFormat, "log-format", "text", "the log's format on stderr: text or json (client-go's log lines too)")
	fs.StringVar(&o.metricsAddr, "metrics-address", "127.0.0.1:9464", "where /metrics, /healthz and /readyz listen (host:port; port 0 picks one)")
	fs.StringVar(&o.frontDoorAddr, "front-door", "", "serve every tenant apiserver on this one address (host:port, such as 0.0.0.0:6443), routed by TLS server name <cluster>.<base-domain>; needs --base-domain")
	fs.StringVar(&o.baseDomain, "base-domain", "", "the DNS domain under which each cluster is <cluster>.<base-domain> at the front door")
	fs.DurationVar(&o.sleepAfter, "sleep-after", 0, "sleep a cluster that sets no spec.sleepAfter after this long without a request through the front door (such as 15m); 0: never. Needs --front-door, which wakes it")
	fs.StringVar(&o.instance, "instance", defaultInstance(), "this serve's name among the instances that share the front (one per host): the Clusters bound to it are the ones it runs")
	fs.StringVar(&o.capacity, "capacity", "", "how many Clusters this instance takes, as clusters=N (0: none new, a drain); placement gives a new Cluster to the instance with the most room. Unset: no cap")
	fs.StringVar(&o.externalDatastore, "external-datastore", "", "a file (0600) with one line, postgres://ADMIN:PASSWORD@HOST:PORT/DATABASE?sslrootcert=CA-FILE: the PostgreSQL server that holds a database per Cluster with spec.datastore external (such a cluster survives the loss of its host: another instance with the same server brings it up)")
	fs.IntVar(&o.frontDoorPort, "front-door-port", 0, "the port tenants dial, when it is not the front door's own (a port forwarded to it); 0: the front door's")
	return cmd
}

// serve is the provider as a service: Clusters declared on a front are made real.
func serve(o *serveOptions, stdout, stderr io.Writer) error {
	if o.maxBringUps < 1 {
		return fmt.Errorf("--max-bring-ups: %d; want 1 or more", o.maxBringUps)
	}
	if o.maxRunning < 0 {
		return fmt.Errorf("--max-running-clusters: %d; want 0 (no cap) or more", o.maxRunning)
	}
	if o.onExit != "stop" && o.onExit != "keep" {
		return fmt.Errorf("--on-exit: %q; want stop or keep", o.onExit)
	}
	if o.maxRestarts < 1 {
		return fmt.Errorf("--max-restarts-at-once: %d; want 1 or more", o.maxRestarts)
	}
	if err := instancelease.ValidateName(o.instance); err != nil {
		return err
	}
	capacity, err := parseCapacity(o.capacity)
	if err != nil {
		return err
	}
	keep := o.onExit == "keep"
	log, err := newLogger(o.logFormat, stderr)
	if err != nil {
		return err
	}
	cfg, err := o.config(stderr)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if o.externalDatastore != "" {
		ext, err := externaldb.Load(o.externalDatastore)
		if err != nil {
			return err
		}
		// Looked at, not required (registerInstance): a server away now keeps the clusters
		// on it off this instance, with a condition that says why; it is no reason to stop
		// serving the others.
		cfg.External = &ext
	}
	// The front door's address is bound before anything changes on disk or starts: a
	// port that cannot be had stops serve here, with nothing to undo.
	doorLn, err := o.listenFrontDoor()
	if err != nil {
		return err
	}
	if doorLn != nil {
		defer doorLn.Close()
		cfg.FrontDoor = o.frontDoor(doorLn)
	}
	lock, err := lockRoot(o.dataRoot)
	if err != nil {
		return err
	}
	defer lock.Release()
	host, _ := os.Hostname()
	metrics := clusterprovider.NewMetrics()
	loop := &clusterprovider.Loop{Instance: o.instance, FormerNames: []string{host}, MaxBringUps: o.maxBringUps, MaxRunning: o.maxRunning, Log: log, Metrics: metrics,
		Adopt: o.adopt, KeepOnExit: keep, MaxRestartsAtOnce: o.maxRestarts}
	cfg.OnEvent, cfg.KeepIdentity = loop.StepEvent, loop.KeepIdentity
	p, err := clusterprovider.New(cfg)
	if err != nil {
		return err
	}
	loop.P = p
	ctx, stop := stopContext(stdout, p.Kill)
	defer stop()

	kubeconfig := o.frontKubeconfig
	var front *clusterprovider.Cluster
	if kubeconfig == "" {
		t0 := time.Now()
		fmt.Fprintln(stdout, "bringing up the front (kine on SQLite, kube-apiserver, kube-controller-manager)")
		upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		if o.adopt {
			front, err = p.UpFront(upCtx)
		} else {
			front, err = p.UpFrontAfresh(upCtx)
		}
		cancel()
		if err != nil && ctx.Err() != nil {
			// Stopped while the front came up: its Spawn reaped what it had started. What
			// an earlier run left is kept for the next start (--on-exit keep, SIGTERM) or
			// reaped here.
			if keep && stoppedBy(ctx) != os.Interrupt {
				fmt.Fprintln(stdout, "stopped before serving; what an earlier serve left runs on, for the next serve to adopt")
				return nil
			}
			if err := p.ReapLeftovers(); err != nil {
				return err
			}
			return confirmStopped(p.Leftovers, stdout, "stopped before serving; nothing is running")
		}
		if err != nil {
			return fmt.Errorf("front: %w", err)
		}
		defer func() {
			if keep {
				front.Detach()
			} else {
				front.Stop()
			}
		}()
		if adopted, _ := front.Adopted(); adopted {
			fmt.Fprintln(stdout, "the front an earlier serve left running is adopted")
		}
		if kubeconfig, err = writeOperatorAccess(o.dataRoot, front.TenantKubeconfig); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "front is Ready in %.2fs at %s\n", time.Since(t0).Seconds(), front.URL)
	}
	var rc *rest.Config
	if front != nil {
		rc, err = serveClientConfig(o.dataRoot, kubeconfig)
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("--front-kubeconfig: %w", err)
	}
	// Every Cluster's passes write through this one client (a finalizer, statuses, a
	// Secret): client-go's default of 5 requests a second made declaring 20 clusters take
	// 13 s, most of it waiting on the limiter (bench/density).
	rc.QPS, rc.Burst = 50, 100
	if err := v1alpha1.InstallCRDs(ctx, apiextensions.NewForConfigOrDie(rc)); err != nil {
		return fmt.Errorf("front: install the CRDs: %w", err)
	}
	ml, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	addHealth(mux, loop.Serving)
	msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go msrv.Serve(ml)
	defer msrv.Close()
	fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", ml.Addr())
	loop.Front, loop.Core = dynamic.NewForConfigOrDie(rc), kubernetes.NewForConfigOrDie(rc)
	loop.Events = frontevents.NewRecorder(loop.Core, "socialweb-clusterprovider", host)
	nameLost := make(chan error, 1)
	release, err := registerInstance(ctx, loop.Core, loop, host+":"+o.dataRoot, capacity, cfg.External, nameLost)
	if err != nil {
		return fmt.Errorf("front: register instance %s: %w", o.instance, err)
	}
	// The Lease goes once nothing runs here, before serve's own front stops: placement
	// stops counting on this instance at once. A stop that keeps the clusters running
	// keeps it for the next serve to renew.
	releaseLease := sync.OnceFunc(func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := release(rctx); err != nil {
			log.Warn("instance lease not released; it expires", "instance", o.instance, "err", err)
		}
	})
	defer func() {
		if !keep {
			releaseLease()
		}
	}()
	defer loop.Events.Shutdown() // after the loop's end: its stop records too
	loop.OnServing = func() { notify(loop.Log, sdnotify.Ready+"\nSTATUS=serving Clusters") }
	var door *frontdoor.Server
	if doorLn != nil {
		door = &frontdoor.Server{Names: cfg.FrontDoor.Names, Backends: loop, Metrics: frontdoor.NewMetrics(metrics.Registry), Log: log}
		loop.Activity, loop.SleepAfter, loop.Router = door, o.sleepAfter, door
	}
	fmt.Fprintf(stdout, "serving Clusters; operator kubeconfig: %s\n", kubeconfig)
	fmt.Fprintf(stdout, "  kubectl --kubeconfig %s apply -f cluster.yaml\n", kubeconfig)
	// Not ctx's child: the loop must not see the signal before serve has decided, from
	// which signal it was, whether the clusters are kept (Loop.KeepOnExit); serve ends it.
	loopCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- loop.Run(loopCtx) }()
	if door != nil {
		doorDone := make(chan error, 1)
		go func() { doorDone <- door.Serve(loopCtx, doorLn) }()
		// The front door stops with the loop (its connections closed as the clusters
		// behind them begin to stop), and serve returns only once it has.
		defer func() {
			cancel()
			if err := <-doorDone; err != nil {
				log.Error("front door", "err", err)
			}
		}()
		fmt.Fprintf(stdout, "front door: %s; cluster NAME of namespace NS is at https://NAME.NS.%[2]s:%[3]d, and at https://NAME.%[2]s:%[3]d in the default namespace\n",
			doorLn.Addr(), cfg.FrontDoor.Names.BaseDomain, cfg.FrontDoor.Port)
	}
	var died, loopErr error
	var frontEvents <-chan clusterprovider.FrontEvent // nil, never ready, without a front of serve's own
	keepCtx, stopKeeping := context.WithCancel(ctx)
	defer stopKeeping()
	if front != nil {
		frontEvents = p.KeepFront(keepCtx, front, log)
	}
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case ev, ok := <-frontEvents:
			if !ok {
				break wait // ctx ended
			}
			if ev.Err != nil {
				died = ev.Err
				break wait
			}
			front = ev.Front
			if _, err := writeOperatorAccess(o.dataRoot, front.TenantKubeconfig); err != nil {
				died = err
				break wait
			}
		case err := <-done:
			loopErr = errors.Join(err, errors.New("the reconcile loop ended"))
			break wait
		case err := <-nameLost:
			// Another serve runs under this name: both would run its Clusters.
			died = err
			break wait
		}
	}
	// A renewal under way when the stop came ends first (a front it started is reaped by
	// its cut-short bring-up); the front that runs then is the one stopped or kept.
	stopKeeping()
	if frontEvents != nil {
		for ev := range frontEvents {
			if ev.Front != nil {
				front = ev.Front
			}
		}
	}
	if loopErr != nil {
		return loopErr // the deferred stop (or detach) of the front that runs now
	}
	notify(loop.Log, sdnotify.Stopping)
	if keep && (stoppedBy(ctx) == os.Interrupt || sdnotify.SystemStopping()) {
		// The operator's own stop, or the host's shutdown (whose final sweep would kill
		// whatever is left out of order): everything goes, in order, as without keep.
		keep, loop.KeepOnExit = false, false
	}
	if keep && died == nil {
		fmt.Fprintln(stdout, "stopping (--on-exit keep): bring-ups under way end or are undone; every Ready cluster and the front keep running for the next serve; Ctrl-C again forces")
		cancel()
		err = <-done
		if front != nil {
			front.Detach()
		}
		if err == nil {
			fmt.Fprintln(stdout, "stopped; the clusters run on, for the next serve to adopt")
		}
		return err
	}
	fmt.Fprintln(stdout, "stopping: every cluster (those being brought up too), then the front; data kept; Ctrl-C again forces")
	cancel()
	err = <-done
	releaseLease()
	if front != nil {
		err = errors.Join(err, front.Stop())
	}
	// Survivors of an earlier run that no bring-up of this one reached before the stop.
	err = errors.Join(err, p.ReapLeftovers())
	if err == nil {
		err = confirmStopped(p.Leftovers, stdout, "stopped; nothing is running")
	}
	return errors.Join(died, err)
}

// listenFrontDoor checks the front door's flags together and binds its address; nil when
// it is off. Every error names the flag to change.
func (o *serveOptions) listenFrontDoor() (net.Listener, error) {
	switch {
	case o.frontDoorAddr == "" && o.baseDomain == "" && o.frontDoorPort == 0 && o.sleepAfter == 0:
		return nil, nil
	case o.frontDoorAddr == "":
		return nil, errors.New("--base-domain, --front-door-port and --sleep-after need --front-door: the address the front door listens on (such as 0.0.0.0:6443)")
	case o.sleepAfter < 0:
		return nil, fmt.Errorf("--sleep-after: %s; want a duration of 0 (never) or more", o.sleepAfter)
	case o.baseDomain == "":
		return nil, errors.New("--front-door needs --base-domain: the domain under which clusters are named (such as kcp.example)")
	case o.frontDoorPort < 0 || o.frontDoorPort > 65535:
		return nil, fmt.Errorf("--front-door-port: %d; want a port, 1-65535 (or 0 for the front door's own)", o.frontDoorPort)
	}
	if err := frontdoor.ValidateBaseDomain(o.baseDomain); err != nil {
		return nil, fmt.Errorf("--base-domain: %w", err)
	}
	ln, err := net.Listen("tcp", o.frontDoorAddr)
	if err != nil {
		return nil, fmt.Errorf("--front-door: %w", err)
	}
	return ln, nil
}

// frontDoor is the provider's view of the front door listening on ln.
func (o *serveOptions) frontDoor(ln net.Listener) clusterprovider.FrontDoor {
	port := o.frontDoorPort
	if port == 0 {
		port = ln.Addr().(*net.TCPAddr).Port
	}
	return clusterprovider.FrontDoor{Names: frontdoor.Names{BaseDomain: o.baseDomain}, Port: port}
}

// addHealth serves the provider's own health, as Kubernetes components answer theirs:
// /healthz is 200 while the process serves HTTP; /readyz is 200 while serving() (the loop
// serves the front: not before its informers synced, not once the stop began), else 503.
func addHealth(mux *http.ServeMux, serving func() bool) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !serving() {
			http.Error(w, "the reconcile loop is not serving the front", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// notify tells systemd state when serve runs under it as a Type=notify unit
// (deploy/socialweb-kcp.service); a failure is logged, not fatal: systemd then times the
// start out and says so itself.
func notify(log *slog.Logger, state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		log.Warn("could not tell systemd the service's state", "state", state, "err", err)
	}
}

// newLogger is serve's one log: slog's text or JSON handler on w, and klog (client-go's
// informers, reflectors and event recorder log through it) routed into the same handler,
// so that one format reaches journald or a log shipper.
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, nil)
	case "json":
		h = slog.NewJSONHandler(w, nil)
	default:
		return nil, fmt.Errorf("--log-format: %q; want text or json", format)
	}
	klog.SetLogger(logr.FromSlogHandler(h))
	return slog.New(h), nil
}
