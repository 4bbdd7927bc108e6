package clusterprovider

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/pgtemplate"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/procgroup"
)

// Readiness deadlines, per step. Measured values on a 2-core machine are far below these
// (docs/benchmarks.md); the deadlines exist so that a hang fails loudly.
const (
	postgresReady  = 30 * time.Second
	kineReady      = 30 * time.Second
	apiserverReady = 90 * time.Second
	controlsReady  = 60 * time.Second
	ccmReady       = 30 * time.Second
)

// StepInput is what StepsFor needs of one cluster.
type StepInput struct {
	Spec     clusterstack.Spec
	Identity Identity
	Admin    kubernetes.Interface // the provider's own client of the tenant apiserver
	// Cgroup, when set, receives every process of the group (the cluster's control group).
	Cgroup processrunner.Placer
	// As is who the processes run as (the cluster's own user, with tenant users).
	As runAs
	// Templates is where Postgres data directory templates are kept ("": initdb for
	// each cluster).
	Templates string
	// Restore is the directory of a restore staged for the cluster: its datastore's dump is
	// loaded into a fresh kine database before kine starts ("": none).
	Restore string
	// External is the external PostgreSQL server, for a cluster whose datastore is there
	// (Spec.External): no Postgres step, and kine's step takes the database over first.
	External *externaldb.Server
	// KeepIdentity, when set, keeps the identity of a cluster whose datastore is external
	// where another instance finds it: before the take, so that a datastore never holds an
	// identity kept nowhere else.
	KeepIdentity func(ctx context.Context) error
	// Sweeper ends the fenced holder's late logins after the take.
	Sweeper *externaldb.Sweeper
}

// StepsFor assembles the cluster's process group: Postgres, kine (carrying the identity
// guard), the control plane, then the cloud controller manager. Every step has its gate.
func StepsFor(in StepInput) ([]procgroup.Step, error) {
	s := in.Spec
	l := s.Layout()
	spec := func(c procgroup.Component) (processrunner.Spec, error) {
		argv, err := s.Argv(c)
		if err != nil {
			return processrunner.Spec{}, err
		}
		sp := componentSpec(s, c, argv)
		sp.Cgroup, sp.User, sp.Env = in.Cgroup, in.As.components(), s.RuntimeEnv(c)
		return sp, nil
	}
	var steps []procgroup.Step
	if !s.Front && s.External == nil {
		pgStep, err := postgresStep(s, in.As, in.Templates, spec)
		if err != nil {
			return nil, err
		}
		steps = append(steps, pgStep)
	}

	kine, err := spec(procgroup.ComponentKine)
	if err != nil {
		return nil, err
	}
	guard := func(ctx context.Context) error { return guardIdentity(ctx, s, in.External, in.Identity) }
	if s.External != nil {
		// Taken over first: whoever held it before is fenced out before this kine starts.
		guard = all(func(ctx context.Context) error { return takeExternal(ctx, s, in.External, in.Sweeper, in.As) }, guard)
		if in.KeepIdentity != nil {
			guard = all(in.KeepIdentity, guard)
		}
	}
	if in.Restore != "" && s.External != nil {
		return nil, errors.New("a restore into an external datastore is not supported: restore into a local one")
	}
	if in.Restore != "" && !s.Front {
		// Loaded before the guard writes this cluster's identity beside it.
		guard = all(func(ctx context.Context) error { return loadRestoredDatastore(ctx, s, in.Restore) }, guard)
	}
	if s.Front {
		guard = func(context.Context) error { return guardFileIdentity(s, in.Identity) }
	} else {
		kine.Env = s.KineEnv()
	}
	steps = append(steps, procgroup.Step{
		Name: procgroup.ComponentKine,
		Spec: kine,
		// Before kine starts, prove the datastore it will serve is this cluster's: the
		// guard rides the last step before the control plane (invariant 9).
		Prepare:      all(guard, func(context.Context) error { return removeStale(l.KineSocket()) }),
		Ready:        waitDial("unix", l.KineSocket()),
		ReadyTimeout: kineReady,
	})

	for _, c := range s.ControlPlane() {
		sp, err := spec(c)
		if err != nil {
			return nil, err
		}
		step := procgroup.Step{Name: c, Spec: sp}
		switch c {
		case procgroup.ComponentAPIServer:
			step.Ready = all(waitReadyz(in.Admin), bootstrapTenantRBAC(in.Admin))
			step.Live = waitReadyz(in.Admin)
			if !s.Front {
				step.Ready = all(step.Ready, bootstrapKubeletClientRBAC(in.Admin))
				step.Prepare = prepareAPIServer(s, in.As)
			}
			step.ReadyTimeout = apiserverReady
		case procgroup.ComponentControlPlane:
			// One process, every gate of the three in their order: the apiserver's, then
			// the controllers' and the scheduler's proofs (invariant 2).
			step.Prepare = prepareAPIServer(s, in.As)
			step.Ready = all(waitReadyz(in.Admin), bootstrapTenantRBAC(in.Admin), bootstrapKubeletClientRBAC(in.Admin),
				waitControllers(in.Admin), waitScheduler(in.Admin))
			step.Live = all(waitReadyz(in.Admin), connected(s.APIServerPort))
			step.ReadyTimeout = apiserverReady + 2*controlsReady
		case procgroup.ComponentControllerManager:
			step.Ready = waitControllers(in.Admin)
			step.Live = connected(s.APIServerPort)
			step.ReadyTimeout = controlsReady
		case procgroup.ComponentScheduler:
			step.Ready = waitScheduler(in.Admin)
			step.Live = connected(s.APIServerPort)
			step.ReadyTimeout = controlsReady
		case procgroup.ComponentK3s:
			step.Ready = all(waitReadyz(in.Admin), bootstrapTenantRBAC(in.Admin), waitControllers(in.Admin), waitScheduler(in.Admin))
			step.Live = all(waitReadyz(in.Admin), connected(s.APIServerPort))
			step.ReadyTimeout = apiserverReady
		}
		steps = append(steps, step)
	}
	if s.Front {
		return steps, validateSteps(steps)
	}

	// The CCM comes after the control plane (seed D1): its credential, its RBAC and the
	// instance snapshot exist before it starts (D3, D4, invariant 10); its environment is
	// its whole configuration, its argv the binary alone.
	ccm, err := spec(procgroup.ComponentCloudControllerManager)
	if err != nil {
		return nil, err
	}
	ccm.Env = s.CloudControllerManagerEnv()
	ready := newLogLine(ccm.LogFile, contract.ReadyLine(s.Name))
	steps = append(steps, procgroup.Step{
		Name: procgroup.ComponentCloudControllerManager,
		Spec: ccm,
		Prepare: all(
			bootstrapCCMRBAC(in.Admin),
			func(context.Context) error { return ensureSnapshot(s) },
			func(context.Context) error { return in.As.own(s) },
		),
		Ready:        ready.wait,
		Live:         connected(s.APIServerPort),
		ReadyTimeout: ccmReady,
	})
	return steps, validateSteps(steps)
}

// prepareAPIServer writes the tenant apiserver's audit policy and admission configuration
// at every start, so a DataDir older than the audit log, or than the policy's last change,
// runs with today's.
func prepareAPIServer(s clusterstack.Spec, as runAs) func(context.Context) error {
	l := s.Layout()
	return func(context.Context) error {
		if err := atomicfile.WriteFile(l.AuditPolicy(), []byte(auditlog.Policy), 0o600); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(l.AdmissionConfig(), []byte(clusterstack.AdmissionConfig), 0o600); err != nil {
			return err
		}
		return as.own(s)
	}
}

func validateSteps(steps []procgroup.Step) error {
	if err := CheckGuardSeam(steps); err != nil {
		return err
	}
	return procgroup.Validate(steps)
}

// postgresStep is the tenant's datastore: initdb on first start, then Postgres as the
// postgres user, ready once kine's role and database exist.
func postgresStep(s clusterstack.Spec, as runAs, templates string, spec func(procgroup.Component) (processrunner.Spec, error)) (procgroup.Step, error) {
	l := s.Layout()
	pg, err := spec(procgroup.ComponentPostgres)
	if err != nil {
		return procgroup.Step{}, err
	}
	pg.User = as.postgres()
	pg.Dir = l.PostgresDir()
	pg.StopSignal = syscall.SIGINT // fast shutdown; SIGTERM waits for clients to leave
	return procgroup.Step{
		Name: procgroup.ComponentPostgres,
		Spec: pg,
		Prepare: func(ctx context.Context) error {
			return initdb(ctx, s, as.postgres(), pg.LogFile, templates)
		},
		Ready: all(
			waitDial("unix", l.PostgresSocket()),
			func(ctx context.Context) error {
				return poll(ctx, "postgres: prepare kine's role and database", func(ctx context.Context) (bool, error) {
					err := prepareDatastore(ctx, s)
					return err == nil, err
				})
			},
		),
		Live:         waitDial("unix", l.PostgresSocket()),
		ReadyTimeout: postgresReady,
	}, nil
}

// componentSpec runs a component of s from its DataDir, writing its own log file
// (logs/<component>.log): it outlives the provider, as a pipe to it would not.
func componentSpec(s clusterstack.Spec, c procgroup.Component, argv []string) processrunner.Spec {
	return processrunner.Spec{Argv: argv, Dir: s.DataDir, Prefix: c.String(), LogFile: s.Layout().Log(c.String())}
}

// initdb creates the Postgres data directory on first start; an existing one is kept (the
// tenant's data). With templates, the directory is a copy of a template made once by
// initdb (internal/pgtemplate), given the cluster's superuser password in single-user mode
// before its server starts; without, initdb makes it. Either runs as the user Postgres runs
// as (as), and reads the password from its standard input or from a copy only that user
// can read, removed right after.
func initdb(ctx context.Context, s clusterstack.Spec, as string, logFile string, templates string) error {
	l := s.Layout()
	uid, gid, err := processrunner.LookupUser(as)
	if err != nil {
		return err
	}
	for _, d := range []string{l.PostgresDir(), l.PostgresSocketDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// Everything under it is that user's: a DataDir Postgres ran in as another user
	// (before tenant users) passes whole to this one.
	if err := ownTree(l.PostgresDir(), uid, gid); err != nil {
		return err
	}
	if _, err := os.Stat(l.PostgresData() + "/PG_VERSION"); err == nil {
		return nil
	}
	os.RemoveAll(l.PostgresData()) // a half-made data dir from an interrupted initdb
	pw, err := os.ReadFile(l.PostgresSuperuserPassword())
	if err != nil {
		return err
	}
	if templates != "" {
		return fromTemplate(ctx, s, as, uid, gid, logFile, templates, strings.TrimSpace(string(pw)))
	}
	tmp := l.PostgresInitPassword()
	if err := writeNew(tmp, pw, uid, gid); err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = processrunner.Run(ctx, processrunner.Spec{
		Argv: s.InitdbArgv(), Dir: l.PostgresDir(), Prefix: "initdb", LogFile: logFile,
		User: as, Env: []string{"LC_ALL=C"},
	})
	if err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	return nil
}

// fromTemplate makes s's data directory a copy of the template for its initdb settings,
// owned by uid:gid, with the superuser's password set in it. The copy is made whole in
// PostgresStaging and renamed into place: a data directory that exists is one a crash
// cannot have left half made or without its password.
func fromTemplate(ctx context.Context, s clusterstack.Spec, as string, uid, gid int, logFile, templates, password string) error {
	l := s.Layout()
	initdbArgv := s.InitdbArgv()
	pin, err := processrunner.BinaryOf(initdbArgv[0])
	if err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	// initdb runs as the shared postgres user into a directory of its own; the template
	// is root's once made, its superuser password a random one nobody keeps: each copy
	// gets its cluster's before it ever serves.
	pgUID, pgGID, err := processrunner.LookupUser(clusterstack.PostgresUser)
	if err != nil {
		return err
	}
	dir, err := pgtemplate.Ensure(ctx, templates, pgtemplate.Key(initdbArgv, fmt.Sprint(pin)), pgUID, pgGID, func(ctx context.Context, data string) error {
		pwfile := data + ".password"
		if err := writeNew(pwfile, []byte(rand.Text()+"\n"), pgUID, pgGID); err != nil {
			return err
		}
		defer os.Remove(pwfile)
		return processrunner.Run(ctx, processrunner.Spec{
			Argv: s.InitdbArgvAt(data, pwfile), Dir: filepath.Dir(data), Prefix: "initdb", LogFile: logFile,
			User: clusterstack.PostgresUser, Env: []string{"LC_ALL=C"},
		})
	})
	if err != nil {
		return err
	}
	staging := l.PostgresStaging()
	if err := os.RemoveAll(staging); err != nil { // what an interrupted start left
		return err
	}
	if err := pgtemplate.Copy(dir, staging, uid, gid); err != nil {
		return err
	}
	defer os.RemoveAll(staging) // gone once renamed
	if err := pgtemplate.Own(staging, uid, gid); err != nil {
		return err
	}
	// The password goes in on standard input, as a quoted literal: never on argv.
	stmt := "ALTER ROLE " + pgx.Identifier{clusterstack.PostgresSuperuser}.Sanitize() + " PASSWORD '" + strings.ReplaceAll(password, "'", "''") + "'\n"
	err = processrunner.Run(ctx, processrunner.Spec{
		Argv: s.SingleUserArgv(staging), Dir: l.PostgresDir(), Prefix: "postgres --single", LogFile: logFile,
		User: as, Env: []string{"LC_ALL=C"}, Stdin: strings.NewReader(stmt),
	})
	if err != nil {
		return fmt.Errorf("postgres superuser password: %w", err)
	}
	// On disk before the rename, and the rename after it: a data directory that exists
	// after a power cut is never one whose files are still empty.
	if err := pgtemplate.Sync(staging); err != nil {
		return err
	}
	if err := os.Rename(staging, l.PostgresData()); err != nil {
		return err
	}
	return atomicfile.SyncDir(l.PostgresDir())
}

// writeNew writes a new file for uid:gid (0600) in a directory that user owns: whatever
// is at path is removed, and the file is made with O_EXCL and O_NOFOLLOW, so a link the
// user planted there is never followed by root's write.
func writeNew(path string, data []byte, uid, gid int) error {
	if err := removeStale(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chown(uid, gid); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func removeStale(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
