package clusterstack

// InitdbArgv creates the cluster's Postgres data directory. The superuser's password is
// read from a file (--pwfile), never given on argv; local connections need it (scram).
func (s Spec) InitdbArgv() []string {
	l := s.Layout()
	return s.InitdbArgvAt(l.PostgresData(), l.PostgresInitPassword())
}

// InitdbArgvAt is InitdbArgv making pgdata, with the password in pwfile: a template's.
func (s Spec) InitdbArgvAt(pgdata, pwfile string) []string {
	return []string{
		s.postgresBin("initdb"),
		"--pgdata=" + pgdata,
		"--username=" + PostgresSuperuser,
		"--pwfile=" + pwfile,
		"--auth-local=scram-sha-256",
		"--auth-host=reject",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	}
}

// SingleUserArgv runs Postgres in single-user mode on the data directory pgdata, as the
// bootstrap superuser in the "postgres" database, reading statements from its standard
// input: how a data directory copied from a template gets the cluster's superuser password
// before its server first starts. A failing statement ends it with an error
// (exit_on_error; single-user mode otherwise goes on and exits 0) and is never written to
// the log (it may hold that password).
func (s Spec) SingleUserArgv(pgdata string) []string {
	return []string{
		s.postgresBin("postgres"), "--single",
		"-D", pgdata,
		"-c", "exit_on_error=true",
		"-c", "log_min_error_statement=panic",
		"-c", "listen_addresses=",
		"postgres", // the database
	}
}

// PostgresArgv runs the server on a unix socket in the DataDir only (no TCP listener),
// sized for one small tenant. fsync, synchronous_commit and full_page_writes are PostgreSQL's
// defaults, set here anyway so that no configuration file can turn them off: a write the
// apiserver acknowledged is on disk before kine answers it (invariant 27).
func (s Spec) PostgresArgv() []string {
	l := s.Layout()
	argv := []string{
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
	if s.SplitControlPlane {
		// The split layout keeps the argv it was started with, so that a group an
		// earlier provider started is adopted as it runs.
		return argv
	}
	// The autovacuum launcher starts a worker for each database that takes connections
	// (kine's, postgres and template1) every naptime, each a new backend: at the default
	// minute, about 0.15 % of a core per idle cluster (docs/benchmarks.md, "Definitions
	// let go, PostgreSQL's idle work"). A tenant's rows die when the apiserver compacts
	// (every 5 minutes unless CompactionInterval says otherwise) and kine deletes them;
	// autovacuum now looks for them every 5 minutes instead of every minute.
	// No logical replication: its launcher is a process of its own, and a tenant's
	// datastore is only ever copied with pg_dump (internal/backup).
	return append(argv, "-c", "autovacuum_naptime=5min", "-c", "max_logical_replication_workers=0")
}
