package clusterprovider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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

// DropRestore removes a restore staged for cluster name, if any: its Cluster is deleted.
func (p *Provider) DropRestore(name string) error { return os.RemoveAll(p.restoreDir(name)) }

// stagedRestore is the manifest of the restore staged for cluster name; false when none
// is.
func (p *Provider) stagedRestore(name string) (backup.Manifest, bool, error) {
	m, ok, err := backup.Staged(p.restoreDir(name))
	if err != nil {
		return m, ok, fmt.Errorf("restore of %s: %w", name, err)
	}
	return m, ok, nil
}

// placeRestoredIdentity places the identity the staged restore carries in s's DataDir.
func (p *Provider) placeRestoredIdentity(s clusterstack.Spec, m backup.Manifest) error {
	if err := backup.PlaceIdentity(p.restoreDir(s.Name), m, s.Name, s.Layout()); err != nil {
		return fmt.Errorf("restore of %s: %w", s.Name, err)
	}
	return nil
}

// finishRestore removes the staging and the mark once the cluster is Ready on the
// restored data.
func (p *Provider) finishRestore(s clusterstack.Spec) error {
	return backup.Finish(p.restoreDir(s.Name), s.Layout())
}

// loadRestoredDatastore loads the staged dump into the cluster's kine database
// (backup.LoadStaged).
func loadRestoredDatastore(ctx context.Context, s clusterstack.Spec, dir string) error {
	if err := backup.LoadStaged(ctx, datastoreOf(s), dir); err != nil {
		return fmt.Errorf("restore: %w", err)
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
