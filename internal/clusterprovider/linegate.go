package clusterprovider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
)

// lineGate is a component's output writer that also watches for one line: the gate of a
// component that says when it is ready (the CCM prints its readiness line on stdout).
type lineGate struct {
	line []byte
	next io.Writer // where the output goes on to; nil discards it

	once sync.Once
	seen chan struct{}
}

func newLineGate(line string, next io.Writer) *lineGate {
	return &lineGate{line: []byte(line), next: next, seen: make(chan struct{})}
}

// Write passes p on; the runner writes one whole line per call.
func (g *lineGate) Write(p []byte) (int, error) {
	if bytes.Contains(p, g.line) {
		g.once.Do(func() { close(g.seen) })
	}
	if g.next == nil {
		return len(p), nil
	}
	return g.next.Write(p)
}

// wait is the gate: ready once the line has been written.
func (g *lineGate) wait(ctx context.Context) error {
	select {
	case <-g.seen:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no line %q: %w", g.line, ctx.Err())
	}
}
