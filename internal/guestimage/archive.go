package guestimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Names reads an image archive's index (OCI: index.json; docker save: manifest.json) and
// returns the image names it carries. A file that is neither is an error naming it.
func Names(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	tr := tar.NewReader(f)
	var names []string
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: not an image archive (a tar of an OCI layout or of docker save): %w", path, err)
		}
		switch h.Name {
		case "index.json":
			found = true
			var idx struct {
				Manifests []struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"manifests"`
			}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
				return nil, fmt.Errorf("%s: index.json: %w", path, err)
			}
			for _, m := range idx.Manifests {
				if n := m.Annotations["io.containerd.image.name"]; n != "" {
					names = append(names, n)
				} else if n := m.Annotations["org.opencontainers.image.ref.name"]; n != "" {
					names = append(names, n)
				}
			}
		case "manifest.json":
			found = true
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
				return nil, fmt.Errorf("%s: manifest.json: %w", path, err)
			}
			for _, x := range m {
				names = append(names, x.RepoTags...)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: not an image archive: it has neither index.json (OCI) nor manifest.json (docker save)", path)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: the archive names no image (tag it before saving it)", path)
	}
	return names, nil
}

// Import loads archive into the containerd at socket, in the CRI's namespace (k8s.io),
// with ctr: what a guest does at boot and `images load` does for running guests.
func Import(ctx context.Context, ctr, socket, archive string) error {
	out, err := exec.CommandContext(ctx, ctr, "--address", socket, "-n", "k8s.io", "images", "import", "--local", archive).CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(fmt.Sprintf("import %s: %v: %s", archive, err, out)))
	}
	return nil
}
