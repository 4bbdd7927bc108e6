package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/clusterstack"
)

// A restore is staged for the provider's bring-up in a directory of its own: Stage writes
// it (the operator's restore command), Staged, PlaceIdentity, LoadStaged and Finish read
// and consume it (the provider's first bring-up of the cluster). One package owns the
// format on both sides.

// Stage writes an opened backup where the provider's bring-up finds it: a directory of
// root's, 0700, made whole under a temporary name, written to disk, and renamed into place
// (the rename written too), so the provider sees all of it or nothing, after a power cut
// as well.
func Stage(dir string, c Contents) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(parent)); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".new-")
	if err != nil {
		return err
	}
	write := func() error {
		mb, err := json.Marshal(c.Manifest)
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, "manifest.json"), mb, 0o600); err != nil {
			return err
		}
		for n, b := range c.Files { // names backup.Open allows: datastore.sql, identity/*
			path := filepath.Join(tmp, n)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
				return err
			}
		}
		if err := atomicfile.SyncDir(tmp); err != nil { // the identity/ entry
			return err
		}
		if err := os.Rename(tmp, dir); err != nil {
			return err
		}
		return atomicfile.SyncDir(parent)
	}
	if err := write(); err != nil {
		return errors.Join(fmt.Errorf("stage the restore in %s: %w", dir, err), os.RemoveAll(tmp))
	}
	return nil
}

// Staged is the manifest of the restore staged in dir; false when none is.
func Staged(dir string) (Manifest, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, false, nil
	}
	if err != nil {
		return Manifest{}, false, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, false, fmt.Errorf("manifest: %w", err)
	}
	return m, true, nil
}

// PlaceIdentity puts the identity files the restore staged in dir carries into cluster
// into's DataDir l, 0600, before anything is minted from them, then marks them placed
// (Layout.RestorePlaced). A bring-up cut short before the mark places all of them again: a
// DataDir never holds some of the backup's identity and some minted anew (a CA without
// its key, an encryption key the restored Secrets were not written with). Once marked they
// are left as they are, with what was minted from them.
func PlaceIdentity(dir string, m Manifest, into string, l clusterstack.Layout) error {
	if exists(l.RestorePlaced()) {
		return nil
	}
	// Minting comes only after the mark: minted files without it are another bring-up's,
	// made without the restore (it began before the restore was staged).
	if exists(l.AdminKubeconfig()) {
		return fmt.Errorf("the DataDir was made without the restore staged for it; remove the cluster (socialweb-kcp down %s) and restore again", into)
	}
	dests := IdentityFiles(l)
	for _, f := range Carried(m.Cluster, into) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(dests[f], b, 0o600); err != nil {
			return err
		}
	}
	return atomicfile.WriteFile(l.RestorePlaced(), []byte(m.Cluster+"\n"), 0o600)
}

// Finish removes the staging in dir and the DataDir's mark once the cluster is Ready on
// the restored data.
func Finish(dir string, l clusterstack.Layout) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Remove(l.RestorePlaced())
}

// LoadStaged loads the dump staged in dir into d, unless kine's table is there already
// (an earlier attempt loaded it). It runs as d's role (kine's), so the table is kine's, as
// one kine made would be.
func LoadStaged(ctx context.Context, d Datastore, dir string) error {
	has, err := d.HasTable(ctx)
	if err != nil || has {
		return err
	}
	sql, err := os.ReadFile(filepath.Join(dir, DatastoreFile))
	if err != nil {
		return err
	}
	if err := d.Load(ctx, sql); err != nil {
		return fmt.Errorf("load the datastore: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
