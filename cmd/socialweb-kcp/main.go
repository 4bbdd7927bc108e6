// Command socialweb-kcp is the operator's client of the cluster provider: it declares
// Clusters and Nodes on the provider's front and shows what the provider makes of them,
// with kubectl's conventions (-o wide|yaml|json, --kubeconfig, -n). It runs no process of
// a cluster itself; "socialweb-clusterprovider serve" does.
//
// Exit codes: 0 done; 1 failed (the message says why); 2 bad usage; 3 a wait timed out
// (what was asked stays declared and the provider keeps at it).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitFailed  = 1
	exitUsage   = 2
	exitTimeout = 3
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// timeoutError is a wait that ran out: exit code 3.
type timeoutError struct {
	what    string
	timeout time.Duration
}

func (e timeoutError) Error() string {
	return fmt.Sprintf("%s: not within --timeout %s; it stays declared and the provider keeps at it", e.what, e.timeout)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, displayName(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// displayName is what help and usage call this command: "kubectl kcp" when it runs as
// the kubectl plugin kubectl-kcp (krew's convention: the binary's name is the plugin's;
// make install puts kubectl-kcp beside socialweb-kcp), else socialweb-kcp.
func displayName(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-kcp" {
		return "kubectl kcp"
	}
	return "socialweb-kcp"
}

// run executes one command line and returns its exit code; name is displayName's.
func run(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "socialweb-kcp:", err)
	return exitCode(err)
}

// exitCode is a command's failure as an exit code: a mistake in the command line (ours,
// or cobra's unknown command) is 2, a wait that ran out 3, anything else 1.
func exitCode(err error) int {
	var ue usageError
	var te timeoutError
	switch {
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "unknown command"):
		return exitUsage
	case errors.As(err, &te):
		return exitTimeout
	}
	return exitFailed
}

// globals are the flags every command has.
type globals struct {
	kubeconfig string
	namespace  string
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "socialweb-kcp",
		Short: "Declare tenant Kubernetes clusters and their nodes on the cluster provider, and watch them",
		Long: `socialweb-kcp declares tenant Kubernetes clusters and their nodes on the cluster provider's
front, and shows what the provider makes of them. The provider itself is
"socialweb-clusterprovider serve" (make run starts it).

Exit codes: 0 done, 1 failed, 2 bad usage, 3 a wait timed out.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", defaultKubeconfig(), "the front's kubeconfig (env SOCIALWEB_KCP_KUBECONFIG; default <data-root>/operator.kubeconfig, which serve writes)")
	pf.StringVarP(&g.namespace, "namespace", "n", "default", "the front namespace (the tenant) the clusters are declared in")
	root.AddCommand(upCmd(g), downCmd(g), parkCmd(g), lsCmd(g), statusCmd(g), kubeconfigCmd(g), nodesCmd(g), auditCmd(g), certsCmd(g), backupCmd(g), restoreCmd(g), hostsCmd(g), imagesCmd(g), versionCmd(g))
	return root
}

func defaultKubeconfig() string {
	if f := os.Getenv("SOCIALWEB_KCP_KUBECONFIG"); f != "" {
		return f
	}
	return filepath.Join(defaultDataRoot(), "operator.kubeconfig")
}

// args checks the positional arguments: n to max of them (max -1: any number). A command's
// Args (args, and the command's own checks of its flag values and arguments) finds every
// usage error, before RunE contacts anything: FuzzCommandLine runs commands without RunE.
func args(n, max int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) < n || max >= 0 && len(a) > max {
			return usageError{fmt.Errorf("%s: want %s (got %d arguments)", cmd.CommandPath(), names, len(a))}
		}
		return nil
	}
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this client's version (its source revision) and the front's",
		Args:  args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "socialweb-kcp: %s\n", clientVersion())
			f, err := g.front()
			if err != nil {
				return err
			}
			v, err := f.core.Discovery().ServerVersion()
			if err != nil {
				return f.explain(err, "version", "")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "front: %s at %s\n", v.GitVersion, f.host)
			return nil
		},
	}
}

// clientVersion is the revision the binary was built from, as the Go toolchain stamped it.
func clientVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", ""
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	return rev + dirty + " (" + bi.GoVersion + ")"
}
