// Command socialweb-cloud-controller-manager is a tenant cluster's cloud controller manager:
// the upstream cloud-node and cloud-node-lifecycle controllers (k8s.io/cloud-provider) over
// socialweb's InstancesV2, which reads the instance snapshot the cluster provider writes.
//
// It takes no arguments: it is configured by its environment (SOCIALWEB_CLOUDCONTROLLERMANAGER_*,
// see internal/cloudprovider/contract), so nothing it is given shows on argv. It refuses an
// admin credential by file name and, once connected, by identity (invariant 20). It prints
// one readiness line on stdout once its informers have synced.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	k8scloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"

	"socialweb.computer/kcp/internal/cloudprovider"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

const name = "socialweb-cloud-controller-manager"

// identityDeadline bounds the identity check; the apiserver is Ready before the CCM starts,
// so this only absorbs a transient error.
const identityDeadline = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := prepare(ctx, os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(run(ctx, cfg, os.Stdout))
}

// prepare reads the environment and proves the credential is not an admin's. Nothing is
// started before it has passed.
func prepare(ctx context.Context, args []string, getenv func(string) string) (cloudprovider.Config, error) {
	if len(args) > 0 {
		return cloudprovider.Config{}, fmt.Errorf("takes no arguments (got %q); it is configured by its environment: %s, %s, %s and optionally %s, %s, %s",
			args, contract.EnvTenantKubeconfig, contract.EnvCluster, contract.EnvInstancesFile, contract.EnvMaxNodes, contract.EnvPodsPerNode, contract.EnvResync)
	}
	cfg, err := cloudprovider.ParseEnv(getenv)
	if err != nil {
		return cfg, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", contract.EnvTenantKubeconfig, err)
	}
	rc.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", contract.EnvTenantKubeconfig, err)
	}
	return cfg, checkIdentity(ctx, client)
}

// checkIdentity retries a failed question until the deadline; an admin answer is final.
func checkIdentity(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, identityDeadline)
	defer cancel()
	for {
		err := cloudprovider.RefuseAdminByIdentity(ctx, client)
		if err == nil || errors.Is(err, cloudprovider.ErrAdminCredential) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// run runs the upstream controller manager with only the two node controllers.
func run(ctx context.Context, cfg cloudprovider.Config, stdout io.Writer) int {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	cloud := cloudprovider.New(cfg, stdout)
	controllers := map[string]app.ControllerInitFuncConstructor{
		names.CloudNodeController: {
			InitContext: app.ControllerInitContext{ClientName: name},
			Constructor: app.StartCloudNodeControllerWrapper,
		},
		names.CloudNodeLifecycleController: {
			InitContext: app.ControllerInitContext{ClientName: name},
			Constructor: app.StartCloudNodeLifecycleControllerWrapper,
		},
	}
	cmd := app.NewCloudControllerManagerCommand(opts,
		func(*config.CompletedConfig) k8scloudprovider.Interface { return cloud },
		controllers, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, ctx.Done())
	cmd.SetArgs(cloudprovider.Flags(cfg))
	return cli.Run(cmd)
}
