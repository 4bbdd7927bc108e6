package procgroup

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/processrunner"
)

// Gate is a readiness check: it returns nil once the step is ready, or an error. It must
// honour ctx, which carries the step's deadline.
type Gate func(ctx context.Context) error

// Step is one component of the group.
type Step struct {
	Name Component
	Spec processrunner.Spec
	// Prepare, when set, runs before the process starts (initdb, a config file on disk).
	Prepare Gate
	// Ready is required: a step without a gate is an error, not a skipped check (invariant 2).
	Ready Gate
	// ReadyTimeout bounds Ready; zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Live, when set, is the gate a running member passes to be adopted by a later run
	// (Adopt); nil means Ready. It must leave no trace and take no action a running
	// member would notice.
	Live Gate
}

// DefaultReadyTimeout bounds a gate whose step sets none.
const DefaultReadyTimeout = 60 * time.Second

// Options configure a group.
type Options struct {
	// RecordDir holds one identity record per running process, so that a later run can
	// find and reap what this one left (invariant 12). Required.
	RecordDir string
	// Marker and Programs, when set, are the backstop by which survivors no record names
	// are still found: a process running one of Programs with Marker (the DataDir) in its
	// arguments belongs to this group.
	Marker   string
	Programs []string
	// Grace is how long a process has between its stop signal and SIGKILL; zero means 10 s.
	Grace time.Duration
	// OnEvent, when set, is told of each step's progress (for timings and progress displays).
	OnEvent func(Event)
	// Inputs is a digest of what the members read besides their argv and environment (the
	// credentials, say): recorded with each member, and a group recorded with other Inputs
	// than a later run's is stale (Adoption.Stale).
	Inputs string
}

// Event reports one step's progress.
type Event struct {
	Step    Component
	Phase   string // "starting", "ready", "failed", "stopping", "stopped"
	Elapsed time.Duration
	Err     error
}

// Errors a caller can test with errors.Is.
var (
	ErrNoGate      = errors.New("step has no readiness gate")
	ErrStepOrder   = errors.New("steps out of component order")
	ErrEarlyExit   = errors.New("process exited")
	ErrNoRecordDir = errors.New("procgroup: Options.RecordDir is required")
)

// StepError says which step failed and carries the tail of its output.
type StepError struct {
	Step Component
	Err  error
	Tail []string

	proc *processrunner.Process // whose tail to take once it has been reaped and drained
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("step %s: %v", e.Step, e.Err)
	if len(e.Tail) > 0 {
		msg += "\nlast output of " + e.Step.String() + ":\n  " + strings.Join(e.Tail, "\n  ")
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

type member struct {
	step Step
	proc *processrunner.Process
}

// GenerationEnv names the environment entry every member is started with: the group's
// generation, minted at each Spawn and written in each record. A process that carries its
// record's generation was started by that Spawn, which a process another started (with the
// same pid, argv and even start time on another boot) cannot show.
const GenerationEnv = "SOCIALWEB_GROUP"

// Group is a spawned process group.
type Group struct {
	opts       Options
	generation string
	members    []member // in start order

	exitOnce sync.Once
	exited   chan Exit
	reaping  chan struct{}
	reapOnce sync.Once
	reapErr  error
}

// Exit tells which member exited while the group was meant to be running.
type Exit struct {
	Step Component
	Err  error
	Tail []string
}

// Validate checks steps without starting anything: every step has a gate, and the steps
// are in strictly increasing component order.
func Validate(steps []Step) error {
	for i, s := range steps {
		if s.Ready == nil {
			return &StepError{Step: s.Name, Err: ErrNoGate}
		}
		if len(s.Spec.Argv) == 0 {
			return &StepError{Step: s.Name, Err: errors.New("empty argv")}
		}
		if i > 0 && s.Name.Order() <= steps[i-1].Name.Order() {
			return fmt.Errorf("%w: %s after %s", ErrStepOrder, s.Name, steps[i-1].Name)
		}
	}
	return nil
}

// Spawn reaps survivors of an earlier run, then starts steps in order, each behind its
// gate. If a gate fails, times out, or any started process exits early, what already
// started is reaped in reverse and the error names the step and the tail of its output.
func Spawn(ctx context.Context, opts Options, steps []Step) (*Group, error) {
	if opts.RecordDir == "" {
		return nil, ErrNoRecordDir
	}
	if opts.Grace == 0 {
		opts.Grace = 10 * time.Second
	}
	if err := Validate(steps); err != nil {
		return nil, err
	}
	if _, err := ReapSurvivors(opts); err != nil {
		return nil, fmt.Errorf("reap survivors: %w", err)
	}
	g := &Group{opts: opts, generation: newGeneration(), exited: make(chan Exit, 1), reaping: make(chan struct{})}
	for _, s := range steps {
		if err := g.start(ctx, s); err != nil {
			g.Reap()
			var se *StepError
			if errors.As(err, &se) && se.proc != nil {
				se.Tail = se.proc.Tail() // complete now: the process has exited and its output drained
			}
			return nil, err
		}
	}
	for _, m := range g.members {
		go g.watch(m)
	}
	return g, nil
}

func (g *Group) event(e Event) {
	if g.opts.OnEvent != nil {
		g.opts.OnEvent(e)
	}
}

func (g *Group) start(ctx context.Context, s Step) error {
	t0 := time.Now()
	g.event(Event{Step: s.Name, Phase: "starting"})
	fail := func(err error, proc *processrunner.Process) error {
		g.event(Event{Step: s.Name, Phase: "failed", Elapsed: time.Since(t0), Err: err})
		return &StepError{Step: s.Name, Err: err, proc: proc}
	}
	if s.Prepare != nil {
		if err := s.Prepare(ctx); err != nil {
			return fail(fmt.Errorf("prepare: %w", err), nil)
		}
	}
	if s.Spec.Prefix == "" {
		s.Spec.Prefix = s.Name.String()
	}
	rec := record{StopSignal: s.Spec.StopSignal, Generation: g.generation, Spec: processrunner.SpecDigest(s.Spec), Inputs: g.opts.Inputs}
	rec.Binary, _ = processrunner.BinaryOf(s.Spec.Argv[0])
	s.Spec.Env = append(slices.Clone(s.Spec.Env), GenerationEnv+"="+g.generation)
	p, err := processrunner.Start(s.Spec)
	if err != nil {
		return fail(err, nil)
	}
	g.members = append(g.members, member{step: s, proc: p})
	rec.Identity, rec.LogFrom = p.Identity(), p.LogFrom()
	if err := g.writeRecord(s.Name, rec); err != nil {
		return fail(err, p)
	}
	timeout := s.ReadyTimeout
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The gate races the exit of every member started so far: a dying dependency fails the
	// bring-up now rather than at the gate's deadline.
	cases := make([]<-chan struct{}, 0, len(g.members))
	for _, m := range g.members {
		cases = append(cases, m.proc.Exited())
	}
	go func() {
		if i := waitAny(gctx, cases); i >= 0 {
			cancel()
		}
	}()
	gateErr := s.Ready(gctx)
	for _, m := range g.members {
		select {
		case <-m.proc.Exited():
			return fail(fmt.Errorf("%w while waiting for %s to be ready: %s: %v", ErrEarlyExit, s.Name, m.step.Name, m.proc.Err()), m.proc)
		default:
		}
	}
	if gateErr != nil {
		return fail(fmt.Errorf("readiness gate (deadline %s): %w", timeout, gateErr), p)
	}
	// Recorded as ready: a later run adopts only members whose gate once passed.
	rec.Ready = true
	if err := g.writeRecord(s.Name, rec); err != nil {
		return fail(err, p)
	}
	g.event(Event{Step: s.Name, Phase: "ready", Elapsed: time.Since(t0)})
	return nil
}

// waitAny returns the index of the first channel to close, or -1 when ctx is done.
func waitAny(ctx context.Context, chs []<-chan struct{}) int {
	done := make(chan int, len(chs))
	for i, c := range chs {
		go func() {
			select {
			case <-c:
				done <- i
			case <-ctx.Done():
			}
		}()
	}
	select {
	case i := <-done:
		return i
	case <-ctx.Done():
		return -1
	}
}

func (g *Group) watch(m member) {
	select {
	case <-m.proc.Exited():
	case <-g.reaping:
		return
	}
	select {
	case <-g.reaping:
		return
	default:
	}
	g.exitOnce.Do(func() {
		g.exited <- Exit{Step: m.step.Name, Err: m.proc.Err(), Tail: m.proc.Tail()}
	})
}

// Exited delivers the first member that exits on its own while the group is running.
func (g *Group) Exited() <-chan Exit { return g.exited }

// Members lists the running members' components and pids, in start order.
func (g *Group) Members() []Member {
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, Member{Step: m.step.Name, Identity: m.proc.Identity()})
	}
	return out
}

// Member is one member's component and identity.
type Member struct {
	Step     Component
	Identity processrunner.Identity
}

// Reap stops every member in the reverse of the start order: its stop signal, the grace,
// SIGKILL to its process group, and a wait for the exit. Then it reaps any survivor its
// records or the marker name. It is idempotent.
func (g *Group) Reap() error {
	g.reapOnce.Do(func() {
		close(g.reaping)
		var errs []error
		for _, m := range slices.Backward(g.members) {
			t0 := time.Now()
			g.event(Event{Step: m.step.Name, Phase: "stopping"})
			m.proc.Stop(g.opts.Grace)
			if err := os.Remove(g.recordPath(m.step.Name)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
			g.event(Event{Step: m.step.Name, Phase: "stopped", Elapsed: time.Since(t0)})
		}
		if _, err := ReapSurvivors(g.opts); err != nil {
			errs = append(errs, err)
		}
		g.reapErr = errors.Join(errs...)
	})
	return g.reapErr
}

func (g *Group) recordPath(c Component) string {
	return recordPath(g.opts.RecordDir, c)
}

func recordPath(dir string, c Component) string {
	return filepath.Join(dir, fmt.Sprintf("%02d-%s.json", int(c), c))
}

func (g *Group) writeRecord(c Component, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(g.recordPath(c), b, 0o600)
}

// ReapSurvivors reaps what an earlier run left: every process a record in RecordDir names
// whose identity (pid, start time, cmdline) still matches, in reverse component order, then
// any process whose cmdline contains Marker. It never adopts. It returns how many it reaped.
func ReapSurvivors(opts Options) (int, error) {
	if opts.Grace == 0 {
		opts.Grace = 10 * time.Second
	}
	names, err := recordFiles(opts.RecordDir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, name := range slices.Backward(names) {
		p := filepath.Join(opts.RecordDir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			errs = append(errs, fmt.Errorf("record %s: %w", p, err))
			continue
		}
		if rec.Alive() {
			n++
			if err := rec.Kill(rec.StopSignal, opts.Grace); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if opts.Marker != "" {
		ids, err := processrunner.FindByMarker(opts.Marker, opts.Programs)
		if err != nil {
			errs = append(errs, err)
		}
		for _, id := range ids {
			n++
			if err := id.Kill(0, opts.Grace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// recordFiles lists the record files in dir (none when dir does not exist), in their
// members' start order: ReapSurvivors walks them backwards.
func recordFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sortByStartOrder(names)
	return names, nil
}

// sortByStartOrder sorts record files by their members' start order (Component.Order).
func sortByStartOrder(files []string) {
	slices.SortStableFunc(files, func(a, b string) int { return cmp.Compare(recordOrder(a), recordOrder(b)) })
}

// recordOrder is the start order of the member a record file names ("05-kube-apiserver.json").
func recordOrder(file string) int {
	c, ok := recordComponent(file)
	if !ok {
		return 0
	}
	return c.Order()
}

// recordComponent is the member a record file names.
func recordComponent(file string) (Component, bool) {
	var n int
	var name string
	if _, err := fmt.Sscanf(strings.TrimSuffix(file, ".json"), "%02d-%s", &n, &name); err != nil {
		return 0, false
	}
	return Component(n), true
}

// Recorded lists the members whose records are in recordDir, in start order, whether they
// still run or not: the layout an earlier run started. It reads the records' names only.
func Recorded(recordDir string) ([]Component, error) {
	names, err := recordFiles(recordDir)
	if err != nil {
		return nil, err
	}
	out := make([]Component, 0, len(names))
	for _, name := range names {
		c, ok := recordComponent(name)
		if !ok {
			return nil, fmt.Errorf("record %s: unparseable name", name)
		}
		out = append(out, c)
	}
	return out, nil
}

// record is what a RecordDir file holds: who the process is and how it asks to be stopped,
// and what a later run needs to prove it ours and current (Adopt).
type record struct {
	processrunner.Identity
	StopSignal syscall.Signal `json:"stopSignal,omitempty"`
	// Generation is the Spawn's (GenerationEnv); Spec the digest of the spec it was started
	// from; Binary its binary as it was on disk then (the pin it runs); Inputs the group's
	// Options.Inputs; LogFrom where its output began in its log file; Ready that its gate
	// passed.
	Generation string               `json:"generation,omitempty"`
	Spec       string               `json:"spec,omitempty"`
	Binary     processrunner.Binary `json:"binary"`
	Inputs     string               `json:"inputs,omitempty"`
	LogFrom    int64                `json:"logFrom,omitempty"`
	// Ready: its gate passed.
	Ready bool `json:"ready,omitempty"`
}

// Running lists the processes the records in recordDir name that still run as recorded
// (same pid, start time and cmdline): what a group of an earlier or another run holds.
func Running(recordDir string) ([]processrunner.Identity, error) {
	names, err := recordFiles(recordDir)
	if err != nil {
		return nil, err
	}
	var out []processrunner.Identity
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(recordDir, name))
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(b, &r) == nil && r.Identity.Alive() {
			out = append(out, r.Identity)
		}
	}
	return out, nil
}
