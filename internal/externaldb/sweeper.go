package externaldb

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sweeper ends, after each take, the late logins of the fenced holder: PostgreSQL reads a
// password's verifier when a login begins, so a login begun just before a take may
// complete up to the server's authentication_timeout after it, and is ended as soon as it
// registers. One Sweeper serves every take of a server through one administrator
// connection, held only while a take is that recent, so a failover of many clusters does
// not cost a connection each.
type Sweeper struct {
	s       Server
	mu      sync.Mutex
	fenced  map[Tenant]time.Time // by tenant: when its last take's fence began (the server's clock)
	running bool
}

// NewSweeper is the Sweeper of s.
func NewSweeper(s Server) *Sweeper { return &Sweeper{s: s, fenced: map[Tenant]time.Time{}} }

// Add sweeps t's logins that began before fenced (a time of the server's clock, from
// Take), for the server's authentication_timeout after it.
func (w *Sweeper) Add(t Tenant, fenced time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fenced[t] = fenced
	if !w.running {
		w.running = true
		go w.run()
	}
}

// run sweeps every second until no take is recent; errors only delay it (the server is
// away: so is every late login).
func (w *Sweeper) run() {
	var c *pgx.Conn
	defer func() {
		if c != nil {
			c.Close(context.Background())
		}
	}()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c = w.sweep(ctx, c)
		cancel()
		w.mu.Lock()
		if len(w.fenced) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		time.Sleep(time.Second)
	}
}

// sweep is one round, through c (dialled when nil or broken); it returns the connection
// to use next.
func (w *Sweeper) sweep(ctx context.Context, c *pgx.Conn) *pgx.Conn {
	if c == nil || c.IsClosed() {
		var err error
		if c, err = w.s.admin(ctx); err != nil {
			return nil
		}
	}
	var now time.Time
	var timeout int
	if err := c.QueryRow(ctx, `SELECT clock_timestamp(), setting::int FROM pg_settings WHERE name = 'authentication_timeout'`).Scan(&now, &timeout); err != nil {
		c.Close(context.Background())
		return nil
	}
	w.mu.Lock()
	due := make(map[Tenant]time.Time, len(w.fenced))
	for t, f := range w.fenced {
		// Both times are the server's: no host clock enters.
		if now.Sub(f) > time.Duration(timeout+1)*time.Second {
			delete(w.fenced, t)
			continue
		}
		due[t] = f
	}
	w.mu.Unlock()
	for t, f := range due {
		if _, err := w.s.endOnce(ctx, c, t, f); err != nil {
			c.Close(context.Background())
			return nil
		}
	}
	return c
}
