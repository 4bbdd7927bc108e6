package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"socialweb.computer/kcp/internal/leftovers"
	"socialweb.computer/kcp/internal/rootlock"
)

// stopContext is canceled by the first SIGINT, SIGTERM or SIGHUP (its terminal went away; by
// default a Go program dies of it, leaving its groups): the command then stops every group
// in order. A second signal calls force once (kill -9 of every group); the orderly stop goes
// on around it, so records are still removed and leases still released (invariant 26).
//
// SIGPIPE is taken too, and dropped: a provider whose output pipe went away (`serve | head`
// ended, a log shipper died) would otherwise die of the next line it prints, in the middle
// of a stop, leaving its groups behind; taken, that write fails with EPIPE and the stop
// goes on.
//
// The context's cause (context.Cause) is the signal, as a stopSignal: serve --on-exit keep
// keeps its clusters on SIGTERM (a service manager's restart) and stops them on SIGINT (the
// operator's Ctrl-C, or systemctl kill -s SIGINT --kill-whom=main).
func stopContext(out io.Writer, force func() error) (context.Context, func()) {
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(nil) }
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	pipe := make(chan os.Signal, 1) // never read: signal.Notify drops what does not fit
	signal.Notify(pipe, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancelCause(stopSignal{s})
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(out, "%s again: forcing, kill -9 of every process the provider started\n", s)
			if err := force(); err != nil {
				fmt.Fprintf(out, "forcing: %v\n", err)
			}
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(sigs); signal.Stop(pipe); close(done); cancel() }
}

// stopSignal is the signal that stopped the command: its context's cause.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.Signal.String() }

// stoppedBy is the signal that ended ctx (stopContext's); nil when none did.
func stoppedBy(ctx context.Context) os.Signal {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		return s.Signal
	}
	return nil
}

// lockRoot makes this process the one provider of root (creating root if it is new), or
// refuses at once, touching nothing, naming the holder.
func lockRoot(root string) (*rootlock.Lock, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("--data-root %s: %w", root, err)
	}
	l, err := rootlock.Acquire(root)
	if errors.Is(err, rootlock.ErrHeld) {
		return nil, fmt.Errorf("--data-root %w; one provider at a time runs a data root: declare clusters through its front with socialweb-kcp (or kubectl), or stop it first", err)
	}
	return l, err
}

// confirmStopped reads the process table and the lease book and prints msg only when
// nothing is left; otherwise what is left is the error.
func confirmStopped(check func() (leftovers.Leftovers, error), out io.Writer, msg string) error {
	left, err := check()
	if err != nil {
		return fmt.Errorf("checking that nothing runs: %w", err)
	}
	if !left.None() {
		return fmt.Errorf("stopped, but still left: %s", left)
	}
	fmt.Fprintln(out, msg)
	return nil
}
