// Package guestimage builds the container images a real guest needs, from local binaries,
// as OCI image archives: no image registry can be reached from these hosts. Two are built:
// the pods' sandbox (pause) image from socialweb-pause, and a busybox image from Debian's
// busybox-static, for tests and for tenants that want a shell. An archive is what `ctr
// images import` (and `socialweb-kcp images load`) reads; it is reproducible: same
// binaries, same bytes.
package guestimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"socialweb.computer/kcp/internal/atomicfile"
)

// The images' names, as pods and containerd's configuration refer to them.
const (
	PauseImage   = "socialweb.local/pause:1"
	BusyboxImage = "socialweb.local/busybox:1"
)

// BusyboxBinary is Debian's busybox-static.
const BusyboxBinary = "/usr/bin/busybox"

// File is one entry of an image's single layer: a regular file (Data) or a symlink (Link).
type File struct {
	Path string // relative, e.g. "bin/sh"
	Mode int64
	Data []byte
	Link string
}

// Image is an image of one layer.
type Image struct {
	Name       string // e.g. socialweb.local/pause:1
	Entrypoint []string
	Cmd        []string
	Env        []string
	Files      []File
}

// Pause is the sandbox image: the pause program at /pause, run as the pod's PID 1.
func Pause(binary []byte) Image {
	return Image{Name: PauseImage, Entrypoint: []string{"/pause"}, Files: []File{{Path: "pause", Mode: 0o755, Data: binary}}}
}

// busyboxApplets are the commands the busybox image has on PATH, each a link to busybox.
var busyboxApplets = []string{"sh", "echo", "cat", "ls", "sleep", "hostname", "wget", "nc", "httpd", "ps", "env", "true", "false", "ip", "ping", "mkdir", "rm", "date", "id"}

// Busybox is a shell image: busybox at /bin/busybox and its applets linked beside it.
func Busybox(binary []byte) Image {
	files := []File{{Path: "bin/busybox", Mode: 0o755, Data: binary}, {Path: "tmp", Mode: 0o1777}}
	for _, a := range busyboxApplets {
		files = append(files, File{Path: "bin/" + a, Link: "busybox"})
	}
	return Image{Name: BusyboxImage, Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}, Files: files}
}

// epoch is every entry's time: the same binaries give the same archive.
var epoch = time.Unix(0, 0).UTC()

// Write renders img as an OCI image layout archive (oci-layout, index.json, blobs) to w.
// The index names the image both ways containerd's importer reads a name.
func Write(w io.Writer, img Image) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": img.Env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": img.Name}
	md["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md}})

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func layerTar(files []File) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: epoch}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.Data == nil:
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string { return "blobs/sha256/" + digest(b)[len("sha256:"):] }

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

// Built is where Build put the archives.
type Built struct {
	Pause, Busybox string
}

// Archives returns the paths of both archives.
func (b Built) Archives() []string { return []string{b.Pause, b.Busybox} }

// Build writes the pause archive (from pauseBinary) and the busybox archive (from
// BusyboxBinary) into dir, atomically and 0644 (images are not secret; every guest reads
// them). It rewrites an archive only when its bytes change.
func Build(dir, pauseBinary string) (Built, error) {
	out := Built{Pause: filepath.Join(dir, "pause.tar"), Busybox: filepath.Join(dir, "busybox.tar")}
	for _, x := range []struct {
		path, binary string
		image        func([]byte) Image
	}{{out.Pause, pauseBinary, Pause}, {out.Busybox, BusyboxBinary, Busybox}} {
		bin, err := os.ReadFile(x.binary)
		if err != nil {
			return Built{}, fmt.Errorf("guest images: %w (install it: bash deploy/install-components.sh)", err)
		}
		var b bytes.Buffer
		if err := Write(&b, x.image(bin)); err != nil {
			return Built{}, err
		}
		if old, err := os.ReadFile(x.path); err == nil && bytes.Equal(old, b.Bytes()) {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Built{}, err
		}
		if err := atomicfile.WriteFile(x.path, b.Bytes(), 0o644); err != nil {
			return Built{}, err
		}
	}
	return out, nil
}
