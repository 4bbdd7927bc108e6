package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/cloudprovider"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Bad input is refused before anything connects or starts, naming what is wrong.
func TestBadInputIsRefusedBeforeConnecting(t *testing.T) {
	good := map[string]string{
		contract.EnvTenantKubeconfig: "/nonexistent/cloud-controller-manager.kubeconfig",
		contract.EnvCluster:          "demo",
		contract.EnvInstancesFile:    "/nonexistent/nodes.json",
	}
	if _, err := prepare(context.Background(), []string{"--kubeconfig=/x"}, getenv(good)); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Fatalf("arguments: %v", err)
	}
	if _, err := prepare(context.Background(), nil, getenv(map[string]string{})); err == nil || !strings.Contains(err.Error(), contract.EnvCluster) || !strings.Contains(err.Error(), contract.EnvTenantKubeconfig) {
		t.Fatalf("empty environment: %v, want every missing variable named", err)
	}
	admin := map[string]string{}
	for k, v := range good {
		admin[k] = v
	}
	admin[contract.EnvTenantKubeconfig] = "/var/lib/socialweb-kcp/clusters/demo/admin.kubeconfig"
	if _, err := prepare(context.Background(), nil, getenv(admin)); !errors.Is(err, cloudprovider.ErrAdminCredential) {
		t.Fatalf("admin.kubeconfig: %v, want ErrAdminCredential", err)
	}
	// A kubeconfig that cannot be read is named with its variable.
	if _, err := prepare(context.Background(), nil, getenv(good)); err == nil || !strings.Contains(err.Error(), contract.EnvTenantKubeconfig) {
		t.Fatalf("unreadable kubeconfig: %v", err)
	}
}
