package guestboot

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/atomicfile"
)

// BootstrapKubeconfigPath is the user data's bootstrap kubeconfig
// (nodejoin.GuestBootstrapKubeconfigPath).
const BootstrapKubeconfigPath = "/etc/kubernetes/bootstrap-kubelet.conf"

// syncServer gives the kubeconfig the kubelet wrote after TLS bootstrapping the server
// and server name of the bootstrap kubeconfig this boot's user data holds. The kubelet
// writes the URL and CA but drops tls-server-name, so without it the kubelet's next start,
// and kube-proxy (which uses this file), would refuse the apiserver's certificate; and
// the apiserver's address may have changed since the first boot.
func syncServer(kubeconfig, bootstrap string) error {
	b, err := clientcmd.LoadFromFile(bootstrap)
	if err != nil {
		return err
	}
	server, name := "", ""
	for _, c := range b.Clusters {
		server, name = c.Server, c.TLSServerName
	}
	k, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return err
	}
	changed := false
	for _, c := range k.Clusters {
		if c.TLSServerName != name || c.Server != server {
			c.TLSServerName, c.Server, changed = name, server, true
		}
	}
	if !changed {
		return nil
	}
	out, err := clientcmd.Write(*k)
	if err != nil {
		return fmt.Errorf("%s: %w", kubeconfig, err)
	}
	return atomicfile.WriteFile(kubeconfig, out, 0o600)
}
