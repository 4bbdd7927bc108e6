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
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/frontevents"
	"socialweb.computer/kcp/internal/sdnotify"
)

// serveOptions are serve's flags.
type serveOptions struct {
	*providerFlags
	frontKubeconfig, logFormat, metricsAddr string
	maxBringUps                             int
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
	fs.StringVar(&o.logFormat, "log-format", "text", "the log's format on stderr: text or json (client-go's log lines too)")
	fs.StringVar(&o.metricsAddr, "metrics-address", "127.0.0.1:9464", "where /metrics, /healthz and /readyz listen (host:port; port 0 picks one)")
	return cmd
}

// serve is the provider as a service: Clusters declared on a front are made real.
func serve(o *serveOptions, stdout, stderr io.Writer) error {
	if o.maxBringUps < 1 {
		return fmt.Errorf("--max-bring-ups: %d; want 1 or more", o.maxBringUps)
	}
	log, err := newLogger(o.logFormat, stderr)
	if err != nil {
		return err
	}
	cfg, err := o.config(stderr)
	if err != nil {
		return err
	}
	lock, err := lockRoot(o.dataRoot)
	if err != nil {
		return err
	}
	defer lock.Release()
	host, _ := os.Hostname()
	metrics := clusterprovider.NewMetrics()
	loop := &clusterprovider.Loop{Instance: host, MaxBringUps: o.maxBringUps, Log: log, Metrics: metrics}
	cfg.OnEvent = loop.StepEvent
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
		front, err = p.UpFront(upCtx)
		cancel()
		if err != nil && ctx.Err() != nil {
			// Stopped while the front came up: its Spawn reaped what it had started; what
			// an earlier run left is reaped here, not left for the next start.
			if err := p.ReapLeftovers(); err != nil {
				return err
			}
			return confirmStopped(p.Leftovers, stdout, "stopped before serving; nothing is running")
		}
		if err != nil {
			return fmt.Errorf("front: %w", err)
		}
		defer front.Stop()
		b, err := os.ReadFile(front.TenantKubeconfig)
		if err != nil {
			return err
		}
		kubeconfig = filepath.Join(o.dataRoot, "operator.kubeconfig")
		if err := atomicfile.WriteFile(kubeconfig, b, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "front is Ready in %.2fs at %s\n", time.Since(t0).Seconds(), front.URL)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--front-kubeconfig: %w", err)
	}
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
	defer loop.Events.Shutdown() // after the loop's end: its stop records too
	loop.OnServing = func() { notify(loop.Log, sdnotify.Ready+"\nSTATUS=serving Clusters") }
	fmt.Fprintf(stdout, "serving Clusters; operator kubeconfig: %s\n", kubeconfig)
	fmt.Fprintf(stdout, "  kubectl --kubeconfig %s apply -f cluster.yaml\n", kubeconfig)
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- loop.Run(loopCtx) }()
	var died error
	if front != nil {
		select {
		case <-ctx.Done():
		case ex := <-front.Exited():
			died = fmt.Errorf("front: %s exited on its own (%v)", ex.Step, ex.Err)
		case err := <-done:
			return errors.Join(err, errors.New("the reconcile loop ended"))
		}
	} else {
		select {
		case <-ctx.Done():
		case err := <-done:
			return errors.Join(err, errors.New("the reconcile loop ended"))
		}
	}
	notify(loop.Log, sdnotify.Stopping)
	fmt.Fprintln(stdout, "stopping: every cluster (those being brought up too), then the front; data kept; Ctrl-C again forces")
	cancel()
	err = <-done
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
