package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// nodeTimeout bounds one node request.
const nodeTimeout = 3 * time.Minute

// nodeView is one guest as "nodes" shows it.
type nodeView struct {
	Name    string  `json:"name"`
	NodeID  string  `json:"nodeID"`
	State   string  `json:"state"`
	Seconds float64 `json:"seconds,omitempty"` // how long an add or remove took
}

// serveControl answers node requests for the running cluster c on its control socket
// (<DataDir>/run/control.sock, in a 0700 directory: root only). It returns a stop function
// that closes and removes the socket.
func serveControl(c *clusterprovider.Cluster) (func(), error) {
	path := c.Spec.Layout().ControlSocket()
	os.Remove(path) // a socket an earlier run left
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, r *http.Request) {
		list, err := c.Instances()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := []nodeView{}
		for _, in := range list {
			out = append(out, nodeView{Name: in.Name, NodeID: in.NodeID, State: string(in.State)})
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /nodes", func(w http.ResponseWriter, r *http.Request) {
		count, err := strconv.Atoi(r.URL.Query().Get("count"))
		if err != nil || count < 1 || count > 100 {
			http.Error(w, "count: want a whole number from 1 to 100", http.StatusBadRequest)
			return
		}
		guest := r.URL.Query().Get("guest")
		if guest == "" {
			guest = nodeprovider.KindKwok
		}
		if _, err := c.GuestsOf(guest); err != nil {
			http.Error(w, "guest: "+err.Error(), http.StatusBadRequest)
			return
		}
		list, err := c.Instances()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), nodeTimeout)
		defer cancel()
		out := []nodeView{}
		for _, id := range clusterprovider.NextNodeIDs(list, count) {
			t0 := time.Now()
			g, err := c.AddNodeOf(ctx, id, guest)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			out = append(out, nodeView{Name: g.Name, NodeID: id, State: string(instancesnapshot.StateRunning), Seconds: time.Since(t0).Seconds()})
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("DELETE /nodes/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		list, err := c.Instances()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		in, ok := findNodeID(list, id)
		if !ok {
			http.Error(w, fmt.Sprintf("cluster %s has no node %q (see: nodes ls %s)", c.Name, id, c.Name), http.StatusNotFound)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), nodeTimeout)
		defer cancel()
		t0 := time.Now()
		if err := c.RemoveNode(ctx, id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode([]nodeView{{Name: in.Name, NodeID: id, State: "removed", Seconds: time.Since(t0).Seconds()}})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	return func() { srv.Close(); os.Remove(path) }, nil
}

func findNodeID(list []instancesnapshot.Instance, id string) (instancesnapshot.Instance, bool) {
	for _, in := range list {
		if in.NodeID == id {
			return in, true
		}
	}
	return instancesnapshot.Instance{}, false
}

// controlClient talks to the provider that runs cluster name under dataRoot.
func controlClient(dataRoot, name string) (*http.Client, error) {
	if err := clusterprovider.ValidateName(name); err != nil {
		return nil, err
	}
	path := clusterstack.Spec{DataDir: clusterprovider.DataDirOf(dataRoot, name)}.Layout().ControlSocket()
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("cluster %s is not running under %s (no control socket %s): start it with: up %s", name, dataRoot, path, name)
	}
	return &http.Client{Timeout: nodeTimeout + 10*time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}, nil
}

// call makes one control request and decodes the answer; a refusal carries its message.
func call(hc *http.Client, method, path string) ([]nodeView, error) {
	req, _ := http.NewRequest(method, "http://control"+path, nil)
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return nil, errors.New(strings.TrimSpace(string(b)))
	}
	var out []nodeView
	return out, json.NewDecoder(res.Body).Decode(&out)
}
