package externaldb

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Health is whether an instance reaches its external datastore, as last seen. It goes in
// the instance's Lease, so that placement offers the datastore only from instances that
// reach it now, and says what keeps the others from it.
type Health struct {
	mu      sync.Mutex
	ok      bool
	problem string
}

// State is whether the server answered the last look, and if not, what that look saw.
func (h *Health) State() (ok bool, problem string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok, h.problem
}

// CheckEvery is how often Watch looks.
const CheckEvery = 10 * time.Second

// Watch looks at s (as its administrator) now and every CheckEvery until ctx ends; a
// change is logged once. A nil s is never reached.
func Watch(ctx context.Context, s *Server, log *slog.Logger) *Health {
	h := &Health{}
	if s == nil {
		return h
	}
	look := func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.Check(cctx)
		cancel()
		h.mu.Lock()
		defer h.mu.Unlock()
		if err == nil {
			if h.problem != "" {
				log.Info("the external datastore answers again", "server", s.Address())
			}
			h.ok, h.problem = true, ""
			return
		}
		problem := err.Error()
		if len(problem) > 300 {
			problem = problem[:300]
		}
		if h.problem != problem {
			log.Warn("the external datastore does not answer; clusters on it are placed on an instance that reaches it, or wait", "err", err)
		}
		h.ok, h.problem = false, problem
	}
	look()
	go func() {
		t := time.NewTicker(CheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				look()
			}
		}
	}()
	return h
}
