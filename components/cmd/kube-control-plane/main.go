// Command kube-control-plane runs a tenant's Kubernetes control plane in one process: the
// upstream kube-apiserver, kube-controller-manager and kube-scheduler, each from its own
// options and flags, as k3s's "server" runs them. Its argv is the three components' flags
// in three sections, in that order, each opened by the component's name:
//
//	kube-control-plane kube-apiserver --etcd-servers=... kube-controller-manager --kubeconfig=... kube-scheduler --kubeconfig=...
//
// Each keeps its own credential (its own kubeconfig) and identity. What the process has
// once is set once: feature gates (from any section) and logging (the apiserver section's
// flags). Leader election must be off in the other two. The controller-manager
// and the scheduler start once the apiserver in this process answers /readyz, as they
// would wait for a separate one. SIGTERM or SIGINT stops all three; the process exits
// when the first of them returns.
//
// KUBE_CONTROL_PLANE_IDLE_GOGC, when set, is the garbage collector's GOGC once the start
// is over (see idleGC); until then the process runs at its GOGC.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
	_ "time/tzdata" // CronJob time zones, as the upstream binaries carry them

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // kubernetes_build_info
	"k8s.io/klog/v2"

	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	controllermanageroptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/controller/volume/attachdetach"
)

const (
	sectionAPIServer         = "kube-apiserver"
	sectionControllerManager = "kube-controller-manager"
	sectionScheduler         = "kube-scheduler"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kube-control-plane:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	sections, err := split(args)
	if err != nil {
		return err
	}
	idleGOGC, err := idleGOGCFrom(os.Getenv(envIdleGOGC))
	if err != nil {
		return err
	}
	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx := signalled

	// Every section is parsed before anything is applied: the three share the process's
	// feature gates and logging (one registry, one klog), which are set once, from all of
	// them, as each upstream command sets them before it runs.
	as := apiserveroptions.NewServerRunOptions()
	asFlags := as.Flags()
	if err := parse(sectionAPIServer, asFlags, sections[sectionAPIServer]); err != nil {
		return err
	}
	as.Flagz = flagz.NamedFlagSetsReader{FlagSets: asFlags}
	cms, err := controllermanageroptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	all, disabled, aliases := controllermanager.KnownControllers(), controllermanager.ControllersDisabledByDefault(), controllermanager.ControllerAliases()
	if err := parse(sectionControllerManager, cms.Flags(all, disabled, aliases), sections[sectionControllerManager]); err != nil {
		return err
	}
	sos := scheduleroptions.NewOptions()
	if err := parse(sectionScheduler, *sos.Flags, sections[sectionScheduler]); err != nil {
		return err
	}
	// A leader election lost ends the upstream controller-manager and scheduler with
	// os.Exit, which here would take the apiserver down mid-request: one process holds one
	// replica of each, and no other may hold the lease.
	if cms.Generic.LeaderElection.LeaderElect || sos.LeaderElection.LeaderElect {
		return fmt.Errorf("--leader-elect must be false in the %s and %s sections: the one process runs the only replica of each", sectionControllerManager, sectionScheduler)
	}
	registry := as.GenericServerRunOptions.ComponentGlobalsRegistry
	if err := registry.Set(); err != nil {
		return err
	}
	featureGate := registry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(as.Logs, featureGate); err != nil {
		return err
	}
	defer klog.Flush()
	// The apiserver's loopback clients should not log warnings it issued itself.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	completed, err := as.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	if sos.InformerName == nil {
		if sos.InformerName, err = cache.NewInformerName(sectionScheduler); err != nil {
			return err
		}
	}
	featureGate.(featuregate.MutableFeatureGate).AddMetrics()
	registry.AddMetrics()

	// The attach/detach controller's reconciler looked at every node's volumes every
	// 100 ms: ten wake-ups a second in every idle tenant control plane, most of them with
	// no volume and no node. Its options have no flag for it; the upstream command passes
	// this package default.
	attachdetach.DefaultTimerConfig.ReconcilerLoopPeriod = attachDetachLoopPeriod

	// The controller-manager and the scheduler start once the apiserver answers.
	apiReady := make(chan struct{})
	ctx, cancel := context.WithCancel(signalled)
	defer cancel()
	done := make(chan result, 3)
	start := func(name string, run func() error) {
		go func() { done <- result{name, run()} }()
	}
	start(sectionAPIServer, func() error { return apiserver.Run(ctx, completed) })
	start(sectionControllerManager, func() error {
		c, err := cms.Config(ctx, all, disabled, aliases)
		if err != nil {
			return err
		}
		if err := waitReady(ctx, c.Client.Discovery().RESTClient()); err != nil {
			return err
		}
		close(apiReady)
		return controllermanager.Run(ctx, c.Complete())
	})
	start(sectionScheduler, func() error {
		select {
		case <-apiReady:
		case <-ctx.Done():
			return nil
		}
		cc, sched, err := scheduler.Setup(ctx, sos)
		if err != nil {
			return err
		}
		return scheduler.Run(ctx, cc, sched)
	})

	if idleGOGC > 0 {
		go idleGC(ctx, apiReady, idleGOGC)
	}

	// The first to return ends all three: a control plane missing one of them is not the
	// one its gates proved, and the supervisor brings the group back whole. The others are
	// stopped and waited for, so the apiserver shuts down as it does alone.
	first := <-done
	var failed error
	if signalled.Err() == nil {
		failed = fmt.Errorf("%s stopped: %v", first.name, first.err)
		klog.ErrorS(failed, "stopping the other components")
	}
	cancel()
	for range 2 {
		<-done
	}
	return failed
}

// result is how one component's run ended.
type result struct {
	name string
	err  error
}

const (
	envIdleGOGC = "KUBE_CONTROL_PLANE_IDLE_GOGC"

	// attachDetachLoopPeriod is how often the attach/detach controller reconciles: a
	// volume is attached or detached at most 0.9 s later than at the upstream 100 ms,
	// beside the seconds an attach takes.
	attachDetachLoopPeriod = time.Second

	// startSettles is how long after the apiserver first answers /readyz the start is
	// taken to be over: the controller-manager's and the scheduler's starts, which follow
	// it, take a few seconds alone and tens of seconds with many control planes starting.
	startSettles = 30 * time.Second
)

// idleGOGCFrom reads KUBE_CONTROL_PLANE_IDLE_GOGC: 0 when unset.
func idleGOGCFrom(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a whole percentage, 1 or more (or leave it unset)", envIdleGOGC, v)
	}
	return n, nil
}

// idleGC sets GOGC to gogc once the start has settled, and returns the memory the start
// used beyond the new goal. A start allocates fast: at a low GOGC it collects often and
// is slower. Once started, the heap is mostly what the start built (the API's OpenAPI
// models and storage, about 100 MB for a tenant), allocation at idle is slow, and a
// lower GOGC holds less memory above it at few more collections than the runtime's own
// one every two minutes (docs/benchmarks.md).
func idleGC(ctx context.Context, apiReady <-chan struct{}, gogc int) {
	select {
	case <-apiReady:
	case <-ctx.Done():
		return
	}
	select {
	case <-time.After(startSettles):
	case <-ctx.Done():
		return
	}
	was := debug.SetGCPercent(gogc)
	debug.FreeOSMemory()
	klog.InfoS("The start has settled: garbage collection at the idle setting", "GOGC", gogc, "was", was)
}

// waitReady waits until the apiserver answers /readyz through c: the controller-manager
// and the scheduler start against a ready apiserver, as they would against a separate one.
func waitReady(ctx context.Context, c rest.Interface) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Get().AbsPath("/readyz").Do(attempt).Error()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// split cuts argv into the three sections, each opened by its component's name.
func split(args []string) (map[string][]string, error) {
	out := map[string][]string{}
	cur := ""
	for _, a := range args {
		switch a {
		case sectionAPIServer, sectionControllerManager, sectionScheduler:
			if _, seen := out[a]; seen {
				return nil, fmt.Errorf("section %s given twice", a)
			}
			cur = a
			out[a] = []string{}
			continue
		}
		if cur == "" {
			return nil, fmt.Errorf("argument %q comes before any section (%s, %s, %s)", a, sectionAPIServer, sectionControllerManager, sectionScheduler)
		}
		out[cur] = append(out[cur], a)
	}
	for _, s := range []string{sectionAPIServer, sectionControllerManager, sectionScheduler} {
		if _, ok := out[s]; !ok {
			return nil, fmt.Errorf("section %s missing", s)
		}
	}
	return out, nil
}

// parse reads one component's flags into its options, in a flag set of its own.
func parse(name string, nfs cliflag.NamedFlagSets, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
