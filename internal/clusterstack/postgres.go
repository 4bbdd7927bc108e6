package clusterstack

// InitdbArgv creates the cluster's Postgres data directory. The superuser's password is
// read from a file (--pwfile), never given on argv; local connections need it (scram).
func (s Spec) InitdbArgv() []string {
	l := s.Layout()
	return []string{
		s.postgresBin("initdb"),
		"--pgdata=" + l.PostgresData(),
		"--username=" + PostgresSuperuser,
		"--pwfile=" + l.PostgresInitPassword(),
		"--auth-local=scram-sha-256",
		"--auth-host=reject",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	}
}

// PostgresArgv runs the server on a unix socket in the DataDir only (no TCP listener),
// sized for one small tenant. fsync, synchronous_commit and full_page_writes are PostgreSQL's
// defaults, set here anyway so that no configuration file can turn them off: a write the
// apiserver acknowledged is on disk before kine answers it (invariant 27).
func (s Spec) PostgresArgv() []string {
	l := s.Layout()
	return []string{
		s.postgresBin("postgres"),
		"-D", l.PostgresData(),
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + l.PostgresSocketDir(),
		"-c", "unix_socket_permissions=0700",
		"-c", "max_connections=40",
		"-c", "shared_buffers=16MB",
		"-c", "max_wal_size=256MB",
		"-c", "logging_collector=off",
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
	}
}
