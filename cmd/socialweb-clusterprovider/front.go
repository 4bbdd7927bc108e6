package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/atomicfile"
)

// The front serve runs is renewed as a tenant is (clusterprovider.Provider.KeepFront). Its
// clients must then use the new client certificate: the operator's kubeconfig is written
// again, and serve's own client reads its certificate from files, which client-go reads
// again when they change.

// writeOperatorAccess writes, from the front's tenant kubeconfig, the operator's kubeconfig
// (<DataRoot>/operator.kubeconfig) and serve's own client certificate and key
// (serveClientConfig), each atomically and 0600; it returns the kubeconfig's path.
func writeOperatorAccess(dataRoot, frontKubeconfig string) (string, error) {
	b, err := os.ReadFile(frontKubeconfig)
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return "", fmt.Errorf("the front's kubeconfig %s: %w", frontKubeconfig, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return "", fmt.Errorf("the front's kubeconfig %s: no user in its current context", frontKubeconfig)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	crt, key := serveClientFiles(dataRoot)
	// The key first: a client that reads between the two writes finds a pair that does
	// not match, fails that one handshake, and reads both again a second later.
	if err := atomicfile.WriteFile(key, user.ClientKeyData, 0o600); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(crt, user.ClientCertificateData, 0o600); err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(dataRoot, "operator.kubeconfig")
	return kubeconfig, atomicfile.WriteFile(kubeconfig, b, 0o600)
}

func serveClientFiles(dataRoot string) (crt, key string) {
	return filepath.Join(dataRoot, "serve-client.crt"), filepath.Join(dataRoot, "serve-client.key")
}

// serveClientConfig is serve's client of its own front: the operator's kubeconfig, its
// client certificate read from files (writeOperatorAccess), so that client-go reads it
// again after a renewal instead of keeping the one it started with until it expires.
func serveClientConfig(dataRoot, kubeconfig string) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.CertData, rc.KeyData = nil, nil
	rc.CertFile, rc.KeyFile = serveClientFiles(dataRoot)
	return rc, nil
}
