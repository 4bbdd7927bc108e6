package clusterstack

import (
	"net/url"
	"strconv"
)

// KineDSN is the datastore kine dials: the cluster's Postgres over its unix socket, as the
// kine role. It carries no password: kine's driver (pgx) reads it from PGPASSFILE.
func (s Spec) KineDSN() string {
	q := url.Values{"host": {s.Layout().PostgresSocketDir()}, "sslmode": {"disable"}}
	return "postgres://" + KineRole + "@/" + KineDatabase + "?" + q.Encode()
}

// KineMaxOpenConnections bounds kine's pool below Postgres's max_connections.
const KineMaxOpenConnections = 20

// KineArgv serves the etcd API on a unix socket only; its metrics listener is off, so the
// apiserver's port is the stack's only TCP port.
func (s Spec) KineArgv() []string {
	endpoint := s.KineDSN()
	if s.Front {
		// The front's own state: small, one writer, no Postgres to run for it.
		endpoint = "sqlite://" + s.Layout().FrontDB() + "?_journal=WAL&cache=shared&_busy_timeout=30000"
	}
	return append([]string{s.Bin("kine")}, flags(map[string]string{
		"endpoint":                       endpoint,
		"listen-address":                 "unix://" + s.Layout().KineSocket(),
		"metrics-bind-address":           "0",
		"datastore-max-open-connections": strconv.Itoa(KineMaxOpenConnections),
		"datastore-max-idle-connections": "4",
	})...)
}

// KineEnv is kine's whole environment: where its password file is, nothing else.
func (s Spec) KineEnv() []string {
	return []string{"PGPASSFILE=" + s.Layout().KinePGPass()}
}
