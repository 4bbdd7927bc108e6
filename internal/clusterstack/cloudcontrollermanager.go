package clusterstack

import (
	"strconv"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

// CloudControllerManagerBinary is the project's own CCM, installed into BinDir.
const CloudControllerManagerBinary = "socialweb-cloud-controller-manager"

// CloudControllerManagerArgv is the binary alone: the CCM takes its whole configuration
// from its environment (CloudControllerManagerEnv), never from argv.
func (s Spec) CloudControllerManagerArgv() []string {
	return []string{s.Bin(CloudControllerManagerBinary)}
}

// CloudControllerManagerEnv is the CCM's whole environment (the contract of seed plan
// 0003). Its credential is a file path; the optional values are set only when given.
func (s Spec) CloudControllerManagerEnv() []string {
	l := s.Layout()
	env := []string{
		contract.EnvTenantKubeconfig + "=" + l.CloudControllerManagerKubeconfig(),
		contract.EnvCluster + "=" + s.Name,
		contract.EnvInstancesFile + "=" + l.NodesFile(),
	}
	if s.MaxNodes > 0 {
		env = append(env, contract.EnvMaxNodes+"="+strconv.Itoa(s.MaxNodes))
	}
	if s.PodsPerNode > 0 {
		env = append(env, contract.EnvPodsPerNode+"="+strconv.Itoa(s.PodsPerNode))
	}
	if s.NodeResync > 0 {
		env = append(env, contract.EnvResync+"="+s.NodeResync.String())
	}
	return env
}
