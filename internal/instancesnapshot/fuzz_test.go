package instancesnapshot

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"

	"socialweb.computer/kcp/internal/nodeprovider"
)

// FuzzParse feeds the CCM's reading of nodes.json arbitrary bytes, for arbitrary cluster
// names. Every input is a list or an error, never a panic; an error says what is wrong
// (the document, or which record and which field), and is never a partial list. What is
// accepted passes Validate, names only cluster's guests, and reads back the same once
// written the way the provider writes it.
func FuzzParse(f *testing.F) {
	for _, seed := range []struct{ json, cluster string }{
		{`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running","addresses":[{"type":"InternalIP","address":"10.0.0.7"},{"type":"Hostname","address":"demo-a"}]}]`, "demo"},
		{`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"stopped"},{"cluster":"demo","name":"demo-b","nodeID":"b","state":"running"}]`, "demo"},
		{`[]`, "demo"},
		{`null`, "demo"},
		{`{}`, "demo"},
		{`[{"cluster":"other","name":"other-a","nodeID":"a","state":"running"}]`, "demo"},
		{`[{"cluster":"demo","name":"demo-A","nodeID":"A","state":"running"}]`, "demo"},
		{`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running","addresses":[{"type":"ExternalIP","address":"::1%eth0"}]}]`, "demo"},
		{`[{"cluster":"","name":"-a","nodeID":"a","state":"running"}]`, ""},
		{`[{"cluster":"demo","name":"demo-a","nodeID":7}]`, "demo"},
	} {
		f.Add([]byte(seed.json), seed.cluster)
	}
	docErr := regexp.MustCompile(`^not a JSON array of instances: .`)
	recordErr := regexp.MustCompile(`^instance \d+( \(".*"\))?: .*\b(cluster|name|nodeID|state|address type|(Internal|External)IP address)\b`)
	f.Fuzz(func(t *testing.T, b []byte, cluster string) {
		list, err := Parse(b, cluster)
		if err != nil {
			if list != nil {
				t.Fatalf("an error (%v) with a partial list %v", err, list)
			}
			if msg := err.Error(); !docErr.MatchString(msg) && !recordErr.MatchString(msg) {
				t.Fatalf("error %q names neither the document nor a record's field", msg)
			}
			return
		}
		if list == nil {
			t.Fatal("no error and a nil list: a null must be refused")
		}
		if err := Validate(list, cluster); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		for _, in := range list {
			if name, err := nodeprovider.NodeName(cluster, in.NodeID); err != nil || in.Cluster != cluster || in.Name != name {
				t.Fatalf("accepted %+v for cluster %q", in, cluster)
			}
		}
		again, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(again, cluster)
		if err != nil || !slices.EqualFunc(back, list, sameInstance) {
			t.Fatalf("written and read back: %+v, %v; want %+v", back, err, list)
		}
	})
}

// sameInstance: equal records; no addresses is no addresses, whether [] or absent.
func sameInstance(a, b Instance) bool {
	return a.Cluster == b.Cluster && a.Name == b.Name && a.NodeID == b.NodeID && a.State == b.State && slices.Equal(a.Addresses, b.Addresses)
}
