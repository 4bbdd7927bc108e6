package clusterstack

import (
	"path/filepath"

	"socialweb.computer/kcp/internal/nodeprovider"
)

// Layout is every path under a cluster's DataDir. It is the one place that knows them.
type Layout struct{ Root string }

// Layout returns the DataDir layout of this stack.
func (s Spec) Layout() Layout { return Layout{Root: s.DataDir} }

func (l Layout) path(p ...string) string { return filepath.Join(append([]string{l.Root}, p...)...) }

// Directories.
func (l Layout) PKIDir() string     { return l.path("pki") }
func (l Layout) RunDir() string     { return l.path("run") }          // process records, kine socket
func (l Layout) NodeRunDir() string { return l.path("run", "nodes") } // the node group's records
// GuestsRunDir holds a directory per real guest, GuestRunDir, with its group's records.
func (l Layout) GuestsRunDir() string             { return l.path("run", "guests") }
func (l Layout) GuestRunDir(nodeID string) string { return filepath.Join(l.GuestsRunDir(), nodeID) }

// GuestsDir holds each real guest's directory; ImagesDir the archives `images load` kept.
func (l Layout) GuestsDir() string    { return l.path(nodeprovider.GuestsDirName) }
func (l Layout) ImagesDir() string    { return l.path("images") }
func (l Layout) LogDir() string       { return l.path("logs") }     // one log per component
func (l Layout) PostgresDir() string  { return l.path("postgres") } // owned by the postgres user
func (l Layout) PostgresData() string { return l.path("postgres", "data") }

// PostgresStaging is where a new data directory is made whole before it is renamed to
// PostgresData: in the DataDir itself, which only root may write.
func (l Layout) PostgresStaging() string   { return l.path("postgres-data.new") }
func (l Layout) PostgresSocketDir() string { return l.path("postgres", "run") }

// Files.
// RenewRequest, when it exists, asks for every leaf certificate of the cluster to be
// minted again (certrenewal.Request): written by the operator or by the provider when a
// leaf falls due while the cluster runs, removed once the renewal is written.
func (l Layout) RenewRequest() string { return l.path("renew-certificates") }

// RestorePlaced marks a DataDir in which a restore's identity files are all placed
// (clusterprovider's restore): until it exists, a bring-up places them again.
func (l Layout) RestorePlaced() string { return l.path("restore-placed") }

// LastBackup records the cluster's last backup (backup.Record): when, where, how big.
func (l Layout) LastBackup() string { return l.path("last-backup.json") }

func (l Layout) Identity() string   { return l.path("identity.json") }
func (l Layout) KineSocket() string { return l.path("sock", "kine.sock") }

// KineSocketDir is kine's own: kine (the cluster's user, with tenant users) makes its
// socket there, away from run/, whose records only the provider may write.
func (l Layout) KineSocketDir() string { return l.path("sock") }

// The front's datastore: kine's SQLite file, and the identity the guard keeps beside it.
func (l Layout) FrontDBDir() string      { return l.path("kine") }
func (l Layout) FrontDB() string         { return l.path("kine", "state.db") }
func (l Layout) FrontDBIdentity() string { return l.path("kine", "identity.json") }

// ControlSocket is where a running provider takes node requests for this cluster (root only).
func (l Layout) ControlSocket() string { return l.path("run", "control.sock") }
func (l Layout) PostgresSocket() string {
	return filepath.Join(l.PostgresSocketDir(), ".s.PGSQL.5432")
}

// The superuser password, readable by root only; initdb reads a copy it may read.
func (l Layout) PostgresSuperuserPassword() string {
	return l.path("pki", "postgres-superuser.password")
}
func (l Layout) PostgresInitPassword() string { return l.path("postgres", "initdb.password") }

// PGPassFile is kine's password, in libpq's passfile format (pgx reads PGPASSFILE).
func (l Layout) KinePGPass() string { return l.path("pki", "kine.pgpass") }

// ExternalPGPass is kine's password for an external datastore, replaced at every start
// (externaldb.Server.Take), and ExternalCA the CA that verifies that server: both read by
// kine, so component files.
func (l Layout) ExternalPGPass() string { return l.path("pki", "external.pgpass") }
func (l Layout) ExternalCA() string     { return l.path("pki", "external-ca.crt") }

// ClusterUID is the front uid of the Cluster whose copy a DataDir of an external cluster
// is: a DataDir of another Cluster of the name is not reused.
func (l Layout) ClusterUID() string       { return l.path("cluster-uid") }
func (l Layout) EncryptionConfig() string { return l.path("pki", "encryption-config.yaml") }

func (l Layout) CACert() string               { return l.path("pki", "ca.crt") }
func (l Layout) CAKey() string                { return l.path("pki", "ca.key") }
func (l Layout) APIServerCert() string        { return l.path("pki", "apiserver.crt") }
func (l Layout) APIServerKey() string         { return l.path("pki", "apiserver.key") }
func (l Layout) FrontProxyCACert() string     { return l.path("pki", "front-proxy-ca.crt") }
func (l Layout) FrontProxyCAKey() string      { return l.path("pki", "front-proxy-ca.key") }
func (l Layout) FrontProxyClientCert() string { return l.path("pki", "front-proxy-client.crt") }
func (l Layout) FrontProxyClientKey() string  { return l.path("pki", "front-proxy-client.key") }
func (l Layout) ServiceAccountKey() string    { return l.path("pki", "sa.key") }
func (l Layout) KubeletClientCert() string    { return l.path("pki", "apiserver-kubelet-client.crt") }
func (l Layout) KubeletClientKey() string     { return l.path("pki", "apiserver-kubelet-client.key") }
func (l Layout) ServiceAccountPub() string    { return l.path("pki", "sa.pub") }

// Kubeconfigs. admin.kubeconfig is the provider's own (system:masters); nothing else reads it.
func (l Layout) AdminKubeconfig() string             { return l.path("admin.kubeconfig") }
func (l Layout) ControllerManagerKubeconfig() string { return l.path("controller-manager.kubeconfig") }
func (l Layout) SchedulerKubeconfig() string         { return l.path("scheduler.kubeconfig") }
func (l Layout) TenantKubeconfig() string            { return l.path("tenant.kubeconfig") }
func (l Layout) CloudControllerManagerKubeconfig() string {
	return l.path("cloud-controller-manager.kubeconfig")
}

func (l Layout) KwokKubeconfig() string { return l.path("kwok.kubeconfig") }
func (l Layout) KwokConfig() string     { return l.path("kwok.yaml") }

// NodesFile is the instance snapshot: the guests behind the cluster's Nodes. Only the
// provider writes it (invariant 10); the CCM reads it.
func (l Layout) NodesFile() string { return l.path("nodes.json") }

// Log is the log file of one component.
func (l Layout) Log(component string) string { return l.path("logs", component+".log") }

// AuditPolicy is the tenant apiserver's audit policy (auditlog.Policy), and AuditLog the
// log it writes, rotated by the apiserver itself, in a directory of its own: the
// apiserver writes there as the cluster's user, while logs/ is the provider's.
func (l Layout) AuditPolicy() string { return l.path("audit-policy.yaml") }

// AdmissionConfig is the tenant apiserver's admission configuration (PodSecurity's
// defaults: AdmissionConfiguration).
func (l Layout) AdmissionConfig() string { return l.path("admission.yaml") }
func (l Layout) AuditDir() string        { return l.path("audit") }
func (l Layout) AuditLog() string        { return l.path("audit", "audit.log") }

// ComponentFiles are the files a tenant's components read: with tenant users, readable by
// the cluster's group (root's, 0640: the user reads them and cannot change them; kine's
// password file alone is the user's, 0600, as libpq wants), each component reading only
// these. Every other file of the DataDir (the admin and tenant kubeconfigs, the identity,
// the superuser password, the front-proxy CA's key, the process records, the component
// logs) is the provider's alone.
func (l Layout) ComponentFiles() []string {
	return []string{
		l.KinePGPass(), l.EncryptionConfig(), l.CACert(), l.CAKey(), l.APIServerCert(), l.APIServerKey(),
		l.FrontProxyCACert(), l.FrontProxyClientCert(), l.FrontProxyClientKey(), l.ServiceAccountKey(), l.ServiceAccountPub(),
		l.KubeletClientCert(), l.KubeletClientKey(), l.AuditPolicy(), l.AdmissionConfig(),
		l.ControllerManagerKubeconfig(), l.SchedulerKubeconfig(), l.CloudControllerManagerKubeconfig(), l.NodesFile(),
		l.KwokKubeconfig(), l.KwokConfig(), l.ExternalPGPass(), l.ExternalCA(),
	}
}

// ComponentDirs are the directories a tenant's components write in, owned by the
// cluster's user (0700): Postgres' data and socket, kine's socket, the apiserver's audit
// log.
func (l Layout) ComponentDirs() []string {
	return []string{l.PostgresDir(), l.KineSocketDir(), l.AuditDir()}
}
