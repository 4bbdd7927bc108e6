package clusterprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/guestboot"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

// LoadedImage is one archive `images load` gave a cluster.
type LoadedImage struct {
	File   string   // as given
	Names  []string // the images it carries
	Guests []string // the running real guests it was imported into
}

// LoadImages gives the cluster whose DataDir is dataDir the image archives files (OCI or
// docker save): each is kept in <DataDir>/images/, which every real guest imports when it
// boots, and imported now into every real guest that runs (like `kind load
// image-archive`). Every file is checked before anything is copied: a bad one changes
// nothing.
func LoadImages(ctx context.Context, dataDir string, files []string) ([]LoadedImage, error) {
	var out []LoadedImage
	for _, f := range files {
		names, err := guestimage.Names(f)
		if err != nil {
			return nil, err
		}
		out = append(out, LoadedImage{File: f, Names: names})
	}
	dir := clusterstack.Layout{Root: dataDir}.ImagesDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	running, err := runningGuests(dataDir)
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		kept, fresh, err := keepArchive(dir, f)
		if err != nil {
			return out, err
		}
		for _, id := range sortedKeys(running) {
			sock := filepath.Join("/proc", strconv.Itoa(running[id]), "root", guestboot.ContainerdSocket)
			// The ctr beside the containerd the guest runs: its configuration names it.
			cfg, err := guestboot.Read(filepath.Join(nodeprovider.Dir(dataDir, id), "guest.json"))
			if err == nil {
				err = guestimage.Import(ctx, filepath.Join(cfg.Bin, "ctr"), sock, kept)
			}
			if err != nil {
				// An archive containerd refuses would fail every later guest's boot: it
				// is not kept.
				if fresh {
					os.Remove(kept)
				}
				return out, fmt.Errorf("guest %s: %w", id, err)
			}
			out[i].Guests = append(out[i].Guests, id)
		}
	}
	return out, nil
}

// keepArchive copies f into dir under its content's digest (a second load of the same
// file is the same copy), 0600, streamed through a temporary file and renamed; fresh says
// whether this call made it.
func keepArchive(dir, f string) (path string, fresh bool, err error) {
	in, err := os.Open(f)
	if err != nil {
		return "", false, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".load-*")
	if err != nil {
		return "", false, err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	defer tmp.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		return "", false, fmt.Errorf("%s: %w", f, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", false, err
	}
	dst := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:16]+".tar")
	if _, err := os.Stat(dst); err == nil {
		return dst, false, nil
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", false, err
	}
	return dst, true, nil
}

// loadedArchives are the archives `images load` kept for the cluster, for a guest's boot.
func loadedArchives(dataDir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(clusterstack.Layout{Root: dataDir}.ImagesDir(), "*.tar"))
	sort.Strings(files)
	return files, err
}

// runningGuests are the cluster's real guests whose init runs, by node id, with its pid
// (from their group records, so another process, the CLI, can find them).
func runningGuests(dataDir string) (map[string]int, error) {
	l := clusterstack.Layout{Root: dataDir}
	ents, err := os.ReadDir(l.GuestsRunDir())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range ents {
		ids, err := procgroup.Running(l.GuestRunDir(e.Name()))
		if err != nil {
			return nil, err
		}
		if len(ids) > 0 {
			out[e.Name()] = ids[0].Pid
		}
	}
	return out, nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
