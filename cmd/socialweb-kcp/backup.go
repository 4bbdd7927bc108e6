package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancelease"
)

// backupCmd writes a backup of a running cluster: its datastore, dumped in one snapshot
// while it serves, and its identity files, in one archive encrypted with the operator's
// key (internal/backup). It runs on the provider's host, as root: it reads the DataDir and
// dials the cluster's Postgres over its socket.
func backupCmd(g *globals) *cobra.Command {
	var dataRoot, file, keyFile, pgBin string
	cmd := &cobra.Command{
		Use:   "backup NAME -f FILE",
		Short: "Back up cluster NAME while it runs: its objects and identity, encrypted (run on the provider's host)",
		Example: `  head -c 32 /dev/urandom | base64 > backup.key && chmod 600 backup.key
  socialweb-kcp backup demo -f demo.backup --key-file backup.key
  SOCIALWEB_BACKUP_KEY=... socialweb-kcp backup demo -f demo.backup`,
		Args: args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, name, out := cmd.Context(), a[0], cmd.OutOrStdout()
			if file == "" {
				return usageError{errors.New("-f FILE: where to write the backup")}
			}
			if _, err := os.Lstat(file); err == nil {
				return fmt.Errorf("-f %s: the file exists; choose another name, or remove it first", file)
			}
			key, err := backup.LoadKey(keyFile)
			if err != nil {
				return err
			}
			dataDir, f, cl, err := hostCluster(ctx, g, name, dataRoot)
			if err != nil {
				return err
			}
			l := clusterstack.Layout{Root: dataDir}
			if _, err := os.Stat(l.PostgresSocket()); err != nil {
				return fmt.Errorf("cluster %s's datastore does not run (it is asleep, parked or stopped): a backup is taken of a running cluster; start it (socialweb-kcp up %s), then back it up", name, name)
			}
			t0 := time.Now()
			sql, keys, err := clusterprovider.DatastoreOf(dataRoot, clusterprovider.LocalNameOf(&cl), pgBin).Dump(ctx)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", name, err)
			}
			files := map[string][]byte{backup.DatastoreFile: sql}
			for n, path := range backup.IdentityFiles(l) {
				if files[n], err = os.ReadFile(path); err != nil {
					return fmt.Errorf("cluster %s's identity: %w", name, err)
				}
			}
			var id clusterprovider.Identity
			if err := json.Unmarshal(files[backup.IdentityFile], &id); err != nil {
				return fmt.Errorf("cluster %s's identity %s: %w", name, l.Identity(), err)
			}
			spec, err := json.Marshal(cl.Spec)
			if err != nil {
				return err
			}
			versions := hostVersions(f)
			if versions["postgres"], err = backup.PostgresMajor(pgBin); err != nil { // the major of the pg_dump that wrote the dump
				return fmt.Errorf("--postgres-bin: %w", err)
			}
			m := backup.Manifest{Cluster: name, Namespace: f.ns, Account: cl.Spec.Account, UID: id.UID, Created: t0.UTC(),
				Spec: spec, Versions: versions, Keys: keys}
			var archive bytes.Buffer
			if err := backup.Write(&archive, key, backup.Contents{Manifest: m, Files: files}); err != nil {
				return err
			}
			if err := atomicfile.WriteFile(file, archive.Bytes(), 0o600); err != nil {
				return fmt.Errorf("-f %s: %w", file, err)
			}
			abs, _ := filepath.Abs(file)
			if err := backup.WriteRecord(l.LastBackup(), backup.Record{Time: t0.UTC(), File: abs, Bytes: int64(archive.Len()), Objects: len(keys)}); err != nil {
				return fmt.Errorf("the backup is written to %s, but not recorded for the metrics: %w", file, err)
			}
			fmt.Fprintf(out, "cluster %s backed up to %s: %d objects, %s, in %.2fs\n", name, file, len(keys), size(archive.Len()), time.Since(t0).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the backup to FILE (0600; an existing file is never overwritten)")
	addKeyFlag(cmd, &keyFile)
	addDataRootFlag(cmd, &dataRoot)
	cmd.Flags().StringVar(&pgBin, "postgres-bin", clusterstack.DefaultPostgresBin, "the directory of PostgreSQL's pg_dump and psql")
	return cmd
}

// restoreCmd declares cluster NAME from a backup: the archive is opened and checked whole
// (key, authentication, manifest, checksums, versions) and the name found free before
// anything is written; then the restore is staged for the provider
// (clusterprovider.RestoreDirOf) and the Cluster declared with the backup's spec. The
// provider's first bring-up of it loads the data; this command waits for it to be Ready
// and checks that every object the backup holds is there.
func restoreCmd(g *globals) *cobra.Command {
	var (
		dataRoot, file, keyFile, pgBin string
		w                              waitFlags
	)
	cmd := &cobra.Command{
		Use:   "restore NAME -f FILE",
		Short: "Declare cluster NAME from a backup: under a new name, or a lost cluster's own (run on the provider's host)",
		Example: `  socialweb-kcp restore demo2 -f demo.backup --key-file backup.key   # another cluster, demo's objects
  socialweb-kcp restore demo -f demo.backup --key-file backup.key    # demo itself, after its data was lost`,
		Args: args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, name, out := cmd.Context(), a[0], cmd.OutOrStdout()
			if file == "" {
				return usageError{errors.New("-f FILE: the backup to restore")}
			}
			// The staging is synced by directory, never through a link: the data root as
			// the provider reaches it.
			if dr, err := filepath.EvalSymlinks(dataRoot); err == nil {
				dataRoot = dr
			}
			if err := clusterprovider.ValidateName(name); err != nil {
				return usageError{err}
			}
			key, err := backup.LoadKey(keyFile)
			if err != nil {
				return err
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("-f: %w", err)
			}
			c, err := backup.Open(raw, key)
			if err != nil {
				return fmt.Errorf("-f %s: %w", file, err)
			}
			var spec v1alpha1.ClusterSpec
			if err := json.Unmarshal(c.Manifest.Spec, &spec); err != nil || spec.Account == "" {
				return fmt.Errorf("-f %s: the backup's cluster spec: %v", file, err)
			}
			f, err := g.front()
			if err != nil {
				return err
			}
			// The staging is read only by the provider of this data root.
			if _, err := os.Stat(filepath.Join(dataRoot, "leases.json")); err != nil {
				return fmt.Errorf("--data-root %s: not the data root of a provider on this host (%v); run restore on the provider's host, with serve's --data-root", dataRoot, err)
			}
			here := hostVersions(f)
			if here["postgres"], err = backup.PostgresMajor(pgBin); err != nil {
				return fmt.Errorf("--postgres-bin: %w", err)
			}
			if err := backup.CheckVersions(c.Manifest.Versions, here); err != nil {
				return err
			}
			// A name no Cluster has, or a parked Cluster whose data is lost (its DataDir gone,
			// or never made: a restore cut short after it declared the Cluster).
			parked := false
			existing, err := f.cluster(ctx, name)
			switch {
			case err == nil && existing.DeletionTimestamp != nil:
				return fmt.Errorf("cluster %s is being deleted; wait for that to end, then restore", name)
			case err == nil && (existing.Spec.Running == nil || *existing.Spec.Running):
				return fmt.Errorf("cluster %s exists in namespace %s and runs: restore into another name; or, if its data is lost, park it first (socialweb-kcp park %s), then restore", name, f.ns, name)
			case err == nil:
				parked = true
			case !apierrors.IsNotFound(err):
				return err
			}
			// With several instances on the front, the cluster must come up on this host's,
			// where the staging is.
			instance, err := localInstance(ctx, f, dataRoot)
			if err != nil {
				return err
			}
			// The staging is keyed by the cluster's local name: a parked Cluster's, or one
			// chosen now and recorded on the Cluster declared (its bind keeps it).
			cl := &v1alpha1.Cluster{TypeMeta: typeMeta("Cluster"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}
			local := name
			if parked {
				if b := existing.Labels[v1alpha1.InstanceLabel]; b != "" && b != instance {
					return fmt.Errorf("cluster %s is bound to instance %s, not to this host's (%s): run restore on %s's host", name, b, orDash(instance), b)
				}
				local = clusterprovider.LocalNameOf(&existing)
			} else {
				all, err := f.clusters(ctx, true)
				if err != nil {
					return err
				}
				local = clusterprovider.ChooseLocalName(cl, all)
				cl.Annotations = map[string]string{v1alpha1.LocalNameAnnotation: local}
			}
			if _, err := os.Lstat(clusterprovider.DataDirOf(dataRoot, local)); err == nil {
				if parked {
					return fmt.Errorf("cluster %s is parked with its data (%s): a restore replaces only data that is lost; remove the cluster (socialweb-kcp down %s), or restore into another name", name, clusterprovider.DataDirOf(dataRoot, local), name)
				}
				return fmt.Errorf("--data-root %s holds a DataDir of cluster %s: it is still being removed, or another front's; wait, or remove it", dataRoot, local)
			}
			staged := clusterprovider.RestoreDirOf(dataRoot, local)
			if _, err := os.Lstat(staged); err == nil && !parked {
				return fmt.Errorf("a restore of %s is staged (%s) and no Cluster %s is declared: remove that directory, then restore again", name, staged, name)
			}
			// Declared parked first, so that the staging is never without its Cluster: a
			// restore cut short leaves a parked Cluster (and maybe its staging), which a
			// restore run again takes as a lost cluster's, and a deletion removes.
			created := false
			if !parked {
				no := false
				cl.Spec.Running, cl.Spec.CreateAsleep = &no, false
				// A backup is of a local datastore, and restored into one, on this host.
				cl.Spec.Datastore, cl.Spec.Placement = "", nil
				if instance != "" {
					cl.Spec.Placement = &v1alpha1.ClusterPlacement{Instance: instance}
				}
				if err := f.create(ctx, cl); err != nil {
					return err
				}
				created = true
			}
			// undo takes back what this run made, in a context of its own (the command's
			// may be what ended).
			undo := func(err error) error {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				err = errors.Join(err, os.RemoveAll(staged))
				if created {
					err = errors.Join(err, f.dyn.Resource(clusterprovider.ClustersResource).Namespace(f.ns).Delete(uctx, name, metav1.DeleteOptions{}))
				}
				return err
			}
			if err := os.RemoveAll(staged); err != nil { // an earlier attempt's, never brought up: the Cluster is parked
				return undo(err)
			}
			if err := backup.Stage(staged, c); err != nil {
				return undo(err)
			}
			if err := f.setRunning(ctx, name, true); err != nil {
				// The patch may have been applied though its answer was lost: then the
				// bring-up needs the staging, and nothing is taken back.
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				now, gerr := f.cluster(uctx, name)
				cancel()
				if gerr != nil || now.Spec.Running == nil || *now.Spec.Running {
					return fmt.Errorf("cluster %s: set it running: %w (it may run; socialweb-kcp status %s tells)", name, err, name)
				}
				return undo(err)
			}
			lost := parked
			identity := "its own identity (a new CA, service-account keys and uid; the encryption key of " + c.Manifest.Cluster + ")"
			if c.Manifest.Cluster == name {
				identity = "the identity of the cluster backed up: its CA, service-account keys, encryption key and uid"
			}
			how := "declared"
			if lost {
				how = "(parked, its data lost) set running"
			}
			fmt.Fprintf(out, "cluster %s %s from the backup of %s taken %s (%d objects), with %s\n", name, how, c.Manifest.Cluster,
				c.Manifest.Created.Format(time.RFC3339), len(c.Manifest.Keys), identity)
			if !w.wait {
				return nil
			}
			var ready v1alpha1.Cluster
			if err := watchCluster(ctx, f, out, w.timeout, name, "Ready", false, func(c v1alpha1.Cluster) (bool, error) { ready = c; return upVerdict(c) }); err != nil {
				return err
			}
			have, err := clusterprovider.DatastoreOf(dataRoot, local, pgBin).Keys(ctx)
			if err != nil {
				return fmt.Errorf("cluster %s is Ready, but its objects could not be counted: %w", name, err)
			}
			if missing := backup.Missing(c.Manifest.Keys, have); len(missing) > 0 {
				return fmt.Errorf("cluster %s is Ready, but %d objects of the backup are not there, such as %s", name, len(missing), strings.Join(missing[:min(3, len(missing))], ", "))
			}
			fmt.Fprintf(out, "cluster %s is Ready at %s with every object of the backup\n  socialweb-kcp kubeconfig %s > %s.kubeconfig\n", name, ready.Status.URL, name, name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the backup to restore (written by socialweb-kcp backup)")
	addKeyFlag(cmd, &keyFile)
	addDataRootFlag(cmd, &dataRoot)
	cmd.Flags().StringVar(&pgBin, "postgres-bin", clusterstack.DefaultPostgresBin, "the directory of PostgreSQL's psql")
	addWaitFlags(cmd, &w, "the cluster is Ready with the backup's objects")
	return cmd
}

func addKeyFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "key-file", "", "the backup key: a file only its owner reads (else env "+backup.KeyEnv+"; never a flag's value)")
}

// hostVersions is the Kubernetes this host runs: the front's (the provider runs every
// apiserver from the same binaries).
func hostVersions(f *front) map[string]string {
	v := map[string]string{}
	if info, err := f.core.Discovery().ServerVersion(); err == nil {
		v["kubernetes"] = info.GitVersion
	}
	return v
}

// size is n bytes for a person: "3.2 MiB".
func size(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// localInstance is the name of the provider instance that serves from dataRoot on this
// host, as its Lease says ("" when none says so: a front with one provider of an older
// version).
func localInstance(ctx context.Context, f *front, dataRoot string) (string, error) {
	leases, err := instancelease.List(ctx, f.core)
	if err != nil {
		return "", f.explain(err, "instance leases", "")
	}
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(dataRoot)
	for _, l := range leases {
		h, root, _ := strings.Cut(l.Where, ":")
		if h == host && filepath.Clean(root) == abs {
			return l.Name, nil
		}
	}
	return "", nil
}
