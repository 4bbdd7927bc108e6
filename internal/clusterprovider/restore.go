package clusterprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/clusterstack"
)

// A restore is staged by the operator (socialweb-kcp restore) for a Cluster it declared
// parked (or found parked with its data lost), which it then sets running: the archive
// opened and checked, its files under RestoreDirOf(dataRoot, name), root's and 0700. The
// cluster's first bring-up then
//
//  1. places the identity files the restore carries (backup.Carried: all of them into the
//     cluster's own name, only the encryption-at-rest key into another) in the DataDir,
//     before its credentials are minted from them (placeRestoredIdentity);
//  2. loads the datastore's dump into its fresh kine database, in one transaction, before
//     the identity guard writes the cluster's identity there and kine starts (the dump
//     holds kine's table alone, never another cluster's identity);
//  3. removes the staging once the cluster is Ready.
//
// A bring-up that fails between them leaves the staging: the next one finds the identity
// placed (marked) and the table loaded, and does neither again. The Cluster's deletion
// removes a staging never brought up (DropRestore).

// RestoreDirOf is where a restore of cluster name is staged under dataRoot.
func RestoreDirOf(dataRoot, name string) string { return filepath.Join(dataRoot, "restores", name) }

func (p *Provider) restoreDir(name string) string { return RestoreDirOf(p.cfg.DataRoot, name) }

// stagedRestore is the manifest of the restore staged for cluster name; false when none
// is.
func (p *Provider) stagedRestore(name string) (backup.Manifest, bool, error) {
	b, err := os.ReadFile(filepath.Join(p.restoreDir(name), "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		return backup.Manifest{}, false, nil
	}
	if err != nil {
		return backup.Manifest{}, false, err
	}
	var m backup.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return backup.Manifest{}, false, fmt.Errorf("restore of %s: manifest: %w", name, err)
	}
	return m, true, nil
}

// placeRestoredIdentity puts the identity files a staged restore carries into the
// DataDir, 0600, before anything is minted from them, then marks them placed
// (Layout.RestorePlaced). A bring-up cut short before the mark places all of them again: a
// DataDir never holds some of the backup's identity and some minted anew (a CA without
// its key, an encryption key the restored Secrets were not written with). Once marked they
// are left as they are, with what was minted from them.
func (p *Provider) placeRestoredIdentity(s clusterstack.Spec, m backup.Manifest) error {
	l := s.Layout()
	if exists(l.RestorePlaced()) {
		return nil
	}
	// Minting comes only after the mark: minted files without it are another bring-up's,
	// made without the restore (it began before the restore was staged).
	if exists(l.AdminKubeconfig()) {
		return fmt.Errorf("restore of %s: its DataDir was made without the restore staged for it; remove the cluster (socialweb-kcp down %s) and restore again", s.Name, s.Name)
	}
	dests := backup.IdentityFiles(l)
	for _, f := range backup.Carried(m.Cluster, s.Name) {
		b, err := os.ReadFile(filepath.Join(p.restoreDir(s.Name), f))
		if err != nil {
			return fmt.Errorf("restore of %s: %w", s.Name, err)
		}
		if err := atomicfile.WriteFile(dests[f], b, 0o600); err != nil {
			return fmt.Errorf("restore of %s: %w", s.Name, err)
		}
	}
	return atomicfile.WriteFile(l.RestorePlaced(), []byte(m.Cluster+"\n"), 0o600)
}

// DropRestore removes a restore staged for cluster name, if any: its Cluster is deleted.
func (p *Provider) DropRestore(name string) error { return os.RemoveAll(p.restoreDir(name)) }

// finishRestore removes the staging and the mark once the cluster is Ready on the
// restored data.
func (p *Provider) finishRestore(s clusterstack.Spec) error {
	if err := os.RemoveAll(p.restoreDir(s.Name)); err != nil {
		return err
	}
	return os.Remove(s.Layout().RestorePlaced())
}

// loadRestoredDatastore loads the staged dump into the cluster's kine database, unless
// kine's table is there already (an earlier attempt loaded it). It runs as kine's role,
// so the table is kine's, as one kine made would be.
func loadRestoredDatastore(ctx context.Context, s clusterstack.Spec, dir string) error {
	d := datastoreOf(s)
	has, err := d.HasTable(ctx)
	if err != nil || has {
		return err
	}
	sql, err := os.ReadFile(filepath.Join(dir, backup.DatastoreFile))
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := d.Load(ctx, sql); err != nil {
		return fmt.Errorf("restore: load the datastore: %w", err)
	}
	return nil
}

// datastoreOf is the cluster's kine database as a backup reads and a restore writes it.
func datastoreOf(s clusterstack.Spec) backup.Datastore {
	l := s.Layout()
	bin := s.PostgresBin
	if bin == "" {
		bin = clusterstack.DefaultPostgresBin
	}
	return backup.Datastore{SocketDir: l.PostgresSocketDir(), Port: 5432, User: clusterstack.KineRole, Database: clusterstack.KineDatabase,
		PassFile: l.KinePGPass(), Bin: bin}
}

// DatastoreOf is the datastore of cluster name under dataRoot, with Postgres' binaries in
// pgBin ("": Debian's): what socialweb-kcp backup dumps, on the provider's host.
func DatastoreOf(dataRoot, name, pgBin string) backup.Datastore {
	return datastoreOf(clusterstack.Spec{Name: name, DataDir: DataDirOf(dataRoot, name), PostgresBin: pgBin})
}
