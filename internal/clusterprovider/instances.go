package clusterprovider

import (
	"fmt"
	"os"
	"slices"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancesnapshot"
)

// ensureSnapshot makes sure nodes.json exists before the CCM starts (invariant 10): "[]"
// on a fresh cluster, the existing guests on a restart. An existing file that does not
// parse stops the bring-up here, naming the file, rather than leaving the CCM to refuse
// it on every call: the provider is its only writer, so it has been damaged.
func ensureSnapshot(s clusterstack.Spec) error {
	path := s.Layout().NodesFile()
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return instancesnapshot.Write(path, s.Name, nil)
	}
	if _, err := instancesnapshot.Read(path, s.Name); err != nil {
		return fmt.Errorf("%w; the provider is its only writer: restore it from the guests that exist (removing it would tell the CCM that none do)", err)
	}
	return nil
}

// Instances reads the cluster's instance snapshot.
func (c *Cluster) Instances() ([]instancesnapshot.Instance, error) {
	return instancesnapshot.Read(c.Spec.Layout().NodesFile(), c.Name)
}

// PutInstance adds a guest to nodes.json, or replaces the record of the same name. The
// provider calls it before it creates the guest (invariant 10): the CCM never sees a Node
// whose guest it does not know, so it never deletes a Node that is joining.
func (c *Cluster) PutInstance(in instancesnapshot.Instance) error {
	return c.editSnapshot(func(list []instancesnapshot.Instance) []instancesnapshot.Instance {
		list = slices.DeleteFunc(list, func(x instancesnapshot.Instance) bool { return x.Name == in.Name })
		return append(list, in)
	})
}

// RemoveInstance drops the guest whose Node is named name from nodes.json; the provider
// calls it only once the guest is gone. The CCM then deletes the Node once it is NotReady.
func (c *Cluster) RemoveInstance(name string) error {
	return c.editSnapshot(func(list []instancesnapshot.Instance) []instancesnapshot.Instance {
		return slices.DeleteFunc(list, func(x instancesnapshot.Instance) bool { return x.Name == name })
	})
}

// editSnapshot is a read-modify-write of nodes.json under the cluster's lock; a snapshot
// that cannot be read is an error, never the empty list to start from (invariant 14).
func (c *Cluster) editSnapshot(edit func([]instancesnapshot.Instance) []instancesnapshot.Instance) error {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	list, err := c.Instances()
	if err != nil {
		return err
	}
	return instancesnapshot.Write(c.Spec.Layout().NodesFile(), c.Name, edit(list))
}
