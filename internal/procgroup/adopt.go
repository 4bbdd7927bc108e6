package procgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"socialweb.computer/kcp/internal/processrunner"
)

// ErrNotAdoptable: what an earlier run left of a group cannot be proven to be that group,
// whole and working. The caller reaps it and spawns the group again (Spawn does both).
var ErrNotAdoptable = errors.New("not adoptable")

// Adoption is what Adopt found of a group it adopted.
type Adoption struct {
	// Stale says, per member, why it runs other than steps would start it now (another
	// binary at its path: a pin changed; another argv or environment; other Inputs). A
	// stale group works and is the caller's to restart when it chooses; empty: current.
	Stale []string
}

// LiveTimeout bounds each member's Live gate during Adopt: a running member answers at once.
const LiveTimeout = 15 * time.Second

// Adopt takes over the group an earlier run of steps left running, when every member is
// proven ours (invariant 12: adopt only what is proven ours, reap the rest): its record
// names a process that still runs as recorded (pid, start time, cmdline), in the working
// directory its step gives, carrying the record's generation in its environment (the
// Spawn that started it), every record of one generation, one record per step and none
// more. Then every member's Live gate (its Ready when it has none) must pass, in order.
// Nothing is signalled, started or removed: on ErrNotAdoptable the caller reaps what is
// there (Spawn, ReapSurvivors); on success the group is supervised as a spawned one is
// (Exited, Reap), and Adoption says whether it is current.
func Adopt(ctx context.Context, opts Options, steps []Step) (*Group, Adoption, error) {
	if opts.RecordDir == "" {
		return nil, Adoption{}, ErrNoRecordDir
	}
	if opts.Grace == 0 {
		opts.Grace = 10 * time.Second
	}
	if err := Validate(steps); err != nil {
		return nil, Adoption{}, err
	}
	recs, err := readRecords(opts.RecordDir)
	if err != nil {
		return nil, Adoption{}, fmt.Errorf("%w: %v", ErrNotAdoptable, err)
	}
	verdicts, err := Prove(recs, steps, opts.Inputs)
	if err != nil {
		return nil, Adoption{}, err
	}
	g := &Group{opts: opts, exited: make(chan Exit, 1), reaping: make(chan struct{})}
	release := func() {
		for _, m := range g.members {
			m.proc.Release()
		}
	}
	var a Adoption
	for i, s := range steps {
		rec := recs[s.Name]
		g.generation = rec.Generation
		if s.Spec.Prefix == "" {
			s.Spec.Prefix = s.Name.String()
		}
		p, err := processrunner.Adopt(rec.Identity, s.Spec, rec.LogFrom)
		if err != nil {
			release()
			return nil, Adoption{}, fmt.Errorf("%w: %s: %v", ErrNotAdoptable, s.Name, err)
		}
		g.members = append(g.members, member{step: s, proc: p})
		a.Stale = append(a.Stale, verdicts[i]...)
	}
	for _, m := range g.members {
		gate := m.step.Live
		if gate == nil {
			gate = m.step.Ready
		}
		gctx, cancel := context.WithTimeout(context.WithValue(ctx, memberPidKey{}, m.proc.Pid()), LiveTimeout)
		err := gate(gctx)
		cancel()
		if err != nil {
			release()
			return nil, Adoption{}, fmt.Errorf("%w: %s: its gate: %v", ErrNotAdoptable, m.step.Name, err)
		}
		g.event(Event{Step: m.step.Name, Phase: "adopted"})
	}
	for _, m := range g.members {
		go g.watch(m)
	}
	return g, a, nil
}

// Prove checks records against steps without touching a process: it is ErrNotAdoptable,
// naming the first member that fails, unless each step has a record whose process runs as
// recorded (pid, start time, cmdline, the very executable file), once ready (its gate
// passed), in the step's working directory (or below it) with the record's generation in
// its environment, all records of one generation and none without a step. For each step it returns why that member is
// stale (empty: current).
func Prove(recs map[Component]record, steps []Step, inputs string) ([][]string, error) {
	notOurs := func(c Component, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrNotAdoptable, c, fmt.Sprintf(format, args...))
	}
	for c := range recs {
		if !slices.ContainsFunc(steps, func(s Step) bool { return s.Name == c }) {
			return nil, notOurs(c, "recorded, but no step of the group is")
		}
	}
	gen := ""
	out := make([][]string, len(steps))
	for i, s := range steps {
		rec, ok := recs[s.Name]
		switch {
		case !ok:
			return nil, notOurs(s.Name, "no record: it does not run")
		case rec.Generation == "":
			return nil, notOurs(s.Name, "its record has no generation (written by an older provider)")
		case gen != "" && rec.Generation != gen:
			return nil, notOurs(s.Name, "its record is of another spawn than the group's first member")
		case !rec.Ready:
			return nil, notOurs(s.Name, "its gate never passed (an earlier bring-up was cut short)")
		case !rec.Identity.Alive():
			return nil, notOurs(s.Name, "pid %d does not run as recorded (gone, another start time or another cmdline)", rec.Pid)
		case !processrunner.EnvironHas(rec.Pid, GenerationEnv+"="+rec.Generation):
			return nil, notOurs(s.Name, "pid %d does not carry the record's generation", rec.Pid)
		}
		// It runs the very binary file recorded at its start (which an upgrade may since
		// have replaced at its path: that makes it stale, below, not foreign).
		running, err := processrunner.RunningBinary(rec.Pid)
		if err != nil || !running.Same(rec.Binary) {
			return nil, notOurs(s.Name, "pid %d runs another executable than the one recorded (%s)", rec.Pid, running.Path)
		}
		gen = rec.Generation
		dir := s.Spec.Dir
		if dir == "" {
			dir = "/"
		}
		// (Postgres moves into its data directory, below the one it started in.)
		if cwd, err := processrunner.Cwd(rec.Pid); err != nil || !strings.HasPrefix(filepath.Clean(cwd)+"/", filepath.Clean(dir)+"/") {
			return nil, notOurs(s.Name, "pid %d runs in %q, not in %s", rec.Pid, cwd, dir)
		}
		// Ours. Current? The binary it runs must be the one at its path now, started
		// from the spec steps give now, with the inputs of now.
		now, err := processrunner.BinaryOf(s.Spec.Argv[0])
		if err != nil || !now.Same(running) {
			out[i] = append(out[i], fmt.Sprintf("%s: its binary %s was replaced", s.Name, s.Spec.Argv[0]))
		}
		if rec.Spec != processrunner.SpecDigest(s.Spec) {
			out[i] = append(out[i], fmt.Sprintf("%s: started with another argv or environment", s.Name))
		}
		if rec.Inputs != inputs {
			out[i] = append(out[i], fmt.Sprintf("%s: its credentials or configuration changed", s.Name))
		}
	}
	return out, nil
}

// readRecords reads every record in dir, by component.
func readRecords(dir string) (map[Component]record, error) {
	names, err := recordFiles(dir)
	if err != nil {
		return nil, err
	}
	out := map[Component]record{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("record %s: %w", name, err)
		}
		c, ok := recordComponent(name)
		if !ok {
			return nil, fmt.Errorf("record %s: unparseable name", name)
		}
		out[c] = rec
	}
	return out, nil
}

type memberPidKey struct{}

// MemberPid is, in the context a Live gate is called with, the pid of the member it
// proves (0 elsewhere): a gate that looks at the process itself (its connections) needs it.
func MemberPid(ctx context.Context) int {
	pid, _ := ctx.Value(memberPidKey{}).(int)
	return pid
}

// Release stops supervising the group and leaves every member running, for a later run
// to adopt: the provider's stop that keeps its clusters (serve --on-exit keep). The group
// is done with: Reap does nothing after it, and no exit is reported.
func (g *Group) Release() {
	g.reapOnce.Do(func() {
		close(g.reaping)
		for _, m := range g.members {
			m.proc.Release()
		}
	})
}

// Generation is the group's generation (GenerationEnv).
func (g *Group) Generation() string { return g.generation }

func newGeneration() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
