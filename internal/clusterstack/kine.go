package clusterstack

import (
	"net"
	"net/url"
	"strconv"
	"time"
)

// KineDSN is the datastore kine dials: the cluster's Postgres over its unix socket, as the
// kine role. It carries no password: kine's driver (pgx) reads it from PGPASSFILE.
func (s Spec) KineDSN() string {
	if e := s.External; e != nil {
		// TLS that verifies the server against the CA the operator named; the password
		// is in PGPASSFILE here too.
		q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {s.Layout().ExternalCA()}}
		return "postgres://" + e.Role + "@" + net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) + "/" + e.Database + "?" + q.Encode()
	}
	q := url.Values{"host": {s.Layout().PostgresSocketDir()}, "sslmode": {"disable"}}
	return "postgres://" + KineRole + "@/" + KineDatabase + "?" + q.Encode()
}

// KinePollInterval is how often kine looks for rows it did not write itself.
const KinePollInterval = 10 * time.Second

// KineProgressNotifyInterval is how often kine looks for watches that asked for progress
// notifications, when its apiserver has no watch cache (Spec.WatchCache), whose watches
// are the only ones that ask.
const KineProgressNotifyInterval = 10 * time.Minute

// KineMaxOpenConnections bounds kine's pool below Postgres's max_connections.
const KineMaxOpenConnections = 20

// FrontDBOptions open the front's SQLite database: WAL with synchronous=FULL, so that a
// commit is on disk before kine acknowledges it, even across a power cut (invariant 27;
// WAL's default, NORMAL, survives a crash of the process but may lose the last commits
// when the host loses power).
const FrontDBOptions = "_journal=WAL&_synchronous=FULL&cache=shared&_busy_timeout=30000"

// WatchCache says whether the stack's apiserver keeps a watch cache: the front's does, a
// tenant's does not. Each of about 60 resources' caches keeps timers and progress requests
// going at idle, which cost a tenant's apiserver more than half its idle CPU and kine 40 %
// of its (docs/benchmarks.md, "Density and speed"); kine serves every watch from one poll
// of its table, and a tenant's lists are small. APIServerArgv and KineArgv (the progress
// interval) both follow it, so that turning a tenant's cache on changes both.
func (s Spec) WatchCache() bool { return s.Front }

// KineArgv serves the etcd API on a unix socket only; its metrics listener is off, so the
// apiserver's port is the stack's only TCP port.
func (s Spec) KineArgv() []string {
	endpoint := s.KineDSN()
	if s.Front {
		// The front's own state: small, one writer, no Postgres to run for it.
		endpoint = "sqlite://" + s.Layout().FrontDB() + "?" + FrontDBOptions
	}
	f := map[string]string{
		"endpoint":                       endpoint,
		"listen-address":                 "unix://" + s.Layout().KineSocket(),
		"metrics-bind-address":           "0",
		"datastore-max-open-connections": strconv.Itoa(KineMaxOpenConnections),
		"datastore-max-idle-connections": "4",
		// The apiserver decides what history goes (--etcd-compaction-interval); kine's
		// default would still keep the last 1,000 revisions, so a quiet tenant never
		// compacted and a continue token never expired.
		"compact-min-retain": "0",
	}
	if !s.SplitControlPlane {
		// kine polls its table for rows other writers added; it is the only writer
		// here, and its own writes wake the poll at once. At kine's 1 s default the
		// polls were most of an idle tenant's kine and PostgreSQL CPU (docs/benchmarks.md,
		// "Fewer wake-ups"). Left to the timer, so up to 10 s late: a write whose
		// wake-up found kine's queue of 1,024 full, and the first after kine starts or
		// after a failed poll query (that wake-up only prepares the query again; see
		// ARCHITECTURE.md section 24). The split layout keeps the argv it was started
		// with, so that it is adopted as it runs.
		f["datastore-poll-interval"] = KinePollInterval.String()
		if !s.WatchCache() {
			// kine wakes each watch stream every 5 s by default to send progress
			// notifications to the watches that asked for them. Only the apiserver's
			// watch cache asks: without one, the ticks of its streams (one per resource
			// watched) sent nothing.
			f["watch-progress-notify-interval"] = KineProgressNotifyInterval.String()
		}
	}
	return append([]string{s.Bin("kine")}, flags(f)...)
}

// KineEnv is kine's whole environment: where its password file is, nothing else.
func (s Spec) KineEnv() []string {
	if s.External != nil {
		return []string{"PGPASSFILE=" + s.Layout().ExternalPGPass()}
	}
	return []string{"PGPASSFILE=" + s.Layout().KinePGPass()}
}
