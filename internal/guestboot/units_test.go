package guestboot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A unit that keeps crashing is in its backoff when the guest stops: the stop ends the
// backoff, nothing starts again, and stopAll returns (it once waited forever on a pid it
// had read before the restart).
func TestStopEndsACrashLoopingUnit(t *testing.T) {
	bin := t.TempDir()
	starts := filepath.Join(t.TempDir(), "starts")
	script := "#!/bin/sh\necho x >> " + starts + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "kube-proxy"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &supervisor{c: Config{Name: "t", Bin: bin, Dir: t.TempDir()}, r: newReaper(), log: t.Logf, stop: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.start(ctx, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	// Wait (on the file, with a deadline) until it has crashed at least once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(starts); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unit never started")
		}
		time.Sleep(20 * time.Millisecond) // polling a file the script writes
	}
	done := make(chan struct{})
	go func() { s.stopAll(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("stopAll did not return while the unit was in its backoff")
	}
	if err := s.start(ctx, "kube-proxy"); err == nil {
		t.Error("a unit started after stopAll")
	}
}
