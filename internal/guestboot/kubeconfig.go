package guestboot

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/atomicfile"
)

// BootstrapKubeconfigPath is the user data's bootstrap kubeconfig
// (nodejoin.GuestBootstrapKubeconfigPath).
const BootstrapKubeconfigPath = "/etc/kubernetes/bootstrap-kubelet.conf"

// keepServerName gives the kubeconfig the kubelet wrote after TLS bootstrapping the
// server name its bootstrap kubeconfig verified the apiserver as: the kubelet writes the
// URL and CA but drops tls-server-name, so without it the kubelet's next start, and
// kube-proxy (which uses this file), would refuse the apiserver's certificate.
func keepServerName(kubeconfig, bootstrap string) error {
	b, err := clientcmd.LoadFromFile(bootstrap)
	if err != nil {
		return err
	}
	name := ""
	for _, c := range b.Clusters {
		name = c.TLSServerName
	}
	if name == "" {
		return nil
	}
	k, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return err
	}
	changed := false
	for _, c := range k.Clusters {
		if c.TLSServerName != name {
			c.TLSServerName, changed = name, true
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
