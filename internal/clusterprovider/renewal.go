package clusterprovider

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"socialweb.computer/kcp/internal/certrenewal"
)

// A running cluster's certificates are renewed by restarting it: every start renews what
// is due (EnsureCredentials), and the components read their certificates at their start.
// The serving certificate alone is reloaded by kube-apiserver; the controller-manager,
// scheduler, CCM and kwok hold theirs in kubeconfigs read once, and the apiserver its
// kubelet and front-proxy client certificates. The restart is the one an upgrade makes:
// one cluster at a time, each behind its gates (Loop.restart), a few seconds without the
// tenant's API once per renewal window (about eight months for a year's certificates).

// nextRenewal is when the first of the leaves in dataDir falls due; false when none will
// (no leaf, or one that cannot be read: that is logged and put in the metrics, and a
// restart every pass would not mend it).
func (p *Provider) nextRenewal(dataDir string) (time.Time, bool) {
	certs, err := certrenewal.Inventory(dataDir)
	if err != nil {
		if p.cfg.Logger != nil {
			p.cfg.Logger.Warn("certificates not scheduled for renewal while running; they are renewed at the next start", "dataDir", dataDir, "err", err)
		}
		return time.Time{}, false
	}
	return p.cfg.Certificates.NextRenewal(certs)
}

// RenewalDue says why the cluster is to be restarted to read new credentials now: a leaf
// fell due (a renewal request is written first, so a provider killed before the restart
// leaves it for the next run), a renewal was requested (socialweb-kcp certs rotate), or
// the credentials its components read changed on disk since they started. Empty: none.
// One caller at a time.
func (c *Cluster) RenewalDue(now time.Time) ([]string, error) {
	l := c.Spec.Layout()
	requested := certrenewal.Requested(l.RenewRequest())
	if !requested && c.renewScheduled && !now.Before(c.renewAt) {
		if err := certrenewal.Request(l.RenewRequest(), "due at "+c.renewAt.UTC().Format(time.RFC3339)); err != nil {
			return nil, fmt.Errorf("cluster %s: request the renewal of its certificates: %w", c.Name, err)
		}
		requested = true
	}
	var why []string
	if requested {
		why = append(why, "certificate renewal requested")
	}
	if inputsDigest(l) != c.inputs {
		why = append(why, "the credentials its components read changed")
	}
	return why, nil
}

// FrontEvent is what KeepFront says of the front: it runs renewed (Front), or it is gone
// (Err).
type FrontEvent struct {
	Front *Cluster
	Err   error
}

// KeepFront watches the front that serve runs until ctx ends, and says on the channel it
// returns when the front exited on its own or could not be brought back (an Err, the last
// event), or was restarted to renew its certificates (the Front that runs now). The front
// is renewed as a tenant is (RenewalDue): stopped, its port kept, and brought up again with
// its data, a few seconds in which writes to it fail and are retried. A look that fails
// (the request cannot be written) is logged and made again at the next tick: it is no
// reason to stop the front. Every event is delivered: the caller reads the channel until
// it is closed, which KeepFront does when it returns.
func (p *Provider) KeepFront(ctx context.Context, front *Cluster, log *slog.Logger) <-chan FrontEvent {
	events := make(chan FrontEvent)
	go func() {
		defer close(events)
		t := time.NewTicker(p.cfg.Certificates.CheckEvery())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ex := <-front.Exited():
				events <- FrontEvent{Err: fmt.Errorf("front: %s exited on its own (%v)", ex.Step, ex.Err)}
				return
			case now := <-t.C:
				why, err := front.RenewalDue(now)
				if err != nil {
					log.Error("the front's certificate renewal; looking again at the next tick", "err", err)
					continue
				}
				if len(why) == 0 {
					continue
				}
				renewed, err := p.renewFront(ctx, front, why, log)
				if err != nil {
					if ctx.Err() == nil {
						events <- FrontEvent{Err: err}
					}
					return
				}
				front = renewed
				events <- FrontEvent{Front: renewed}
			}
		}
	}()
	return events
}

// renewFront restarts the front to read renewed credentials and returns the front that
// runs then.
func (p *Provider) renewFront(ctx context.Context, front *Cluster, why []string, log *slog.Logger) (*Cluster, error) {
	log.Info("restarting the front to renew its certificates", "why", why)
	t0 := time.Now()
	if err := front.StopToRestart(); err != nil {
		return nil, fmt.Errorf("front: stop it to renew its certificates: %w", err)
	}
	upCtx, cancel := context.WithTimeout(ctx, bringUpDeadline)
	defer cancel()
	renewed, err := p.UpFrontAfresh(upCtx)
	if err != nil {
		return nil, fmt.Errorf("front: bring it up again with renewed certificates: %w", err)
	}
	log.Info("the front runs with renewed certificates", "took", time.Since(t0).Round(time.Millisecond))
	return renewed, nil
}
