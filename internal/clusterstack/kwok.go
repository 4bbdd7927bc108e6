package clusterstack

import (
	"strconv"

	"socialweb.computer/kcp/internal/nodeprovider"
)

// KwokArgv simulates the kubelets of the cluster's kwok guests (the Nodes that carry kwok's
// annotation, nothing else), under kwok's own identity, with the stages in its config file.
// It listens on nothing (no --server-address, no --node-port).
func (s Spec) KwokArgv() []string {
	l := s.Layout()
	return append([]string{s.Bin("kwok")}, flags(map[string]string{
		"kubeconfig":                            l.KwokKubeconfig(),
		"config":                                l.KwokConfig(),
		"manage-nodes-with-annotation-selector": nodeprovider.KwokAnnotation + "=" + nodeprovider.KwokAnnotationValue,
		"node-lease-duration-seconds":           strconv.Itoa(nodeprovider.KwokLeaseSeconds),
	})...)
}
