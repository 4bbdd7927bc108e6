package guestimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// An archive is an OCI image layout naming the image, and the same files give the same
// bytes.
func TestWriteIsAnOCILayoutAndReproducible(t *testing.T) {
	var a, b bytes.Buffer
	if err := Write(&a, Busybox([]byte("bin"))); err != nil {
		t.Fatal(err)
	}
	Write(&b, Busybox([]byte("bin")))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of the same image differ")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %s %v", files["index.json"], err)
	}
	m := index.Manifests[0]
	if m.Annotations["io.containerd.image.name"] != BusyboxImage {
		t.Errorf("image name %v", m.Annotations)
	}
	manifest := files["blobs/sha256/"+m.Digest[len("sha256:"):]]
	var parsed struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(manifest, &parsed); err != nil || len(parsed.Layers) != 1 {
		t.Fatalf("manifest %s: %v", manifest, err)
	}
	for _, d := range []string{parsed.Config.Digest, parsed.Layers[0].Digest} {
		if _, ok := files["blobs/sha256/"+d[len("sha256:"):]]; !ok {
			t.Errorf("blob %s missing", d)
		}
	}
	layer := tar.NewReader(bytes.NewReader(files["blobs/sha256/"+parsed.Layers[0].Digest[len("sha256:"):]]))
	links := 0
	for {
		h, err := layer.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeSymlink && h.Linkname == "busybox" {
			links++
		}
	}
	if links != len(busyboxApplets) {
		t.Errorf("%d applet links, want %d", links, len(busyboxApplets))
	}
}
