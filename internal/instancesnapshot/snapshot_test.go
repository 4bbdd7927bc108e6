package instancesnapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func guest(id string) Instance {
	return Instance{Cluster: "demo", Name: "demo-" + id, NodeID: id, State: StateRunning,
		Addresses: []Address{{Type: "InternalIP", Address: "10.0.0.7"}, {Type: "Hostname", Address: "demo-" + id}}}
}

func TestWriteThenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.json")
	if err := Write(path, "demo", []Instance{guest("a"), guest("b")}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	list, err := Read(path, "demo")
	if err != nil || len(list) != 2 || list[1].Name != "demo-b" {
		t.Fatalf("Read = %+v, %v", list, err)
	}
	if _, ok := Find(list, "demo-a"); !ok {
		t.Fatal("Find missed demo-a")
	}
}

func TestAnEmptyListIsWrittenAsAnArray(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.json")
	if err := Write(path, "demo", nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("nodes.json = %q, want []", b)
	}
}

func TestAbsentIsNoGuestsNotAnError(t *testing.T) {
	list, err := Read(filepath.Join(t.TempDir(), "nodes.json"), "demo")
	if err != nil || list != nil {
		t.Fatalf("Read(absent) = %v, %v", list, err)
	}
}

func TestBadSnapshotsAreErrorsNamingTheProblem(t *testing.T) {
	cases := map[string]struct{ json, want string }{
		"not json":          {`{"oops"`, "not a JSON array"},
		"an object":         {`{}`, "not a JSON array"},
		"null":              {`null`, "got null"},
		"truncated":         {`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running"}`, "not a JSON array"},
		"another cluster":   {`[{"cluster":"other","name":"other-a","nodeID":"a","state":"running"}]`, `belongs to cluster "demo"`},
		"name not derived":  {`[{"cluster":"demo","name":"a","nodeID":"a","state":"running"}]`, "NodeName"},
		"bad node id":       {`[{"cluster":"demo","name":"demo-A","nodeID":"A","state":"running"}]`, "nodeID"},
		"listed twice":      {`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running"},{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running"}]`, "twice"},
		"unknown state":     {`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"gone"}]`, "state"},
		"unknown addr type": {`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running","addresses":[{"type":"IP","address":"1.2.3.4"}]}]`, "address type"},
		"bad ip":            {`[{"cluster":"demo","name":"demo-a","nodeID":"a","state":"running","addresses":[{"type":"InternalIP","address":"1.2.3"}]}]`, "InternalIP address"},
	}
	for name, c := range cases {
		path := filepath.Join(t.TempDir(), "nodes.json")
		os.WriteFile(path, []byte(c.json), 0o600)
		list, err := Read(path, "demo")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) || list != nil {
			t.Errorf("%s: Read = %v, %v; want an error naming the file and %q", name, list, err, c.want)
		}
	}
}

func TestWriteRefusesWhatReadWouldRefuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.json")
	bad := guest("a")
	bad.Cluster = "other"
	if err := Write(path, "demo", []Instance{bad}); err == nil {
		t.Fatal("Write accepted another cluster's guest")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("a refused Write left a file")
	}
}
