package clusterprovider

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/objectcap"
)

// capInterval is how often a running cluster's objects are counted against its cap: the
// most a tenant's creates may outrun the cap by is what it creates in this time. Without a
// cap they are counted at countInterval, for the metric.
const (
	capInterval   = 5 * time.Second
	countInterval = 30 * time.Second
)

// holdObjectCap holds the running cluster to its cap on stored objects until it stops:
// it counts them every capInterval, and puts the refusing policy in its apiserver at the
// cap (again at every count, should the tenant, a cluster-admin, have deleted it) and
// takes it away below (internal/objectcap). A cap of 0 takes away a policy an earlier
// cap left, and counts for the metric only.
func (c *Cluster) holdObjectCap(cap int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stopping
		cancel()
	}()
	log := c.p.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("cluster", c.Name)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	enforced := true // until known: the first pass takes away a policy an earlier cap left
	for {
		count, err := c.countObjects(ctx, &conn)
		if err == nil {
			c.objects.Store(count)
			if want := objectcap.Enforce(count, cap); want != enforced {
				if err = c.setObjectCap(ctx, want, cap); err == nil {
					if want || cap > 0 {
						log.Info("object cap", "enforced", want, "objects", count, "cap", cap)
					}
					enforced = want
				}
			} else if want {
				err = c.keepObjectCap(ctx, cap)
			}
		}
		if err != nil && ctx.Err() == nil {
			// Retried at the next count (the apiserver restarting, Postgres busy).
			log.Debug("object cap: count or policy", "err", err)
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
		}
		every := capInterval
		if cap == 0 {
			every = countInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// countObjects counts the cluster's live objects, over one connection kept open.
func (c *Cluster) countObjects(ctx context.Context, conn **pgx.Conn) (int64, error) {
	if *conn == nil {
		l := c.Spec.Layout()
		su, err := os.ReadFile(l.PostgresSuperuserPassword())
		if err != nil {
			return 0, err
		}
		if *conn, err = pgConnect(ctx, c.Spec, clusterstack.PostgresSuperuser, clusterstack.KineDatabase, strings.TrimSpace(string(su))); err != nil {
			return 0, err
		}
	}
	var n int64
	err := (*conn).QueryRow(ctx, objectcap.CountSQL).Scan(&n)
	return n, err
}

// setObjectCap puts the refusing policy and its binding in the tenant apiserver, or takes
// them away.
func (c *Cluster) setObjectCap(ctx context.Context, on bool, cap int64) error {
	api := c.admin.AdmissionregistrationV1()
	if !on {
		err := api.ValidatingAdmissionPolicyBindings().Delete(ctx, objectcap.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = api.ValidatingAdmissionPolicies().Delete(ctx, objectcap.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	policy, binding := objectcap.Policy(c.Name, cap)
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		old, gerr := api.ValidatingAdmissionPolicies().Get(ctx, objectcap.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		policy.ResourceVersion = old.ResourceVersion
		if _, err := api.ValidatingAdmissionPolicies().Update(ctx, policy, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// keepObjectCap puts the policy back if its binding or itself is gone.
func (c *Cluster) keepObjectCap(ctx context.Context, cap int64) error {
	api := c.admin.AdmissionregistrationV1()
	_, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, objectcap.Name, metav1.GetOptions{})
	if err == nil {
		_, err = api.ValidatingAdmissionPolicies().Get(ctx, objectcap.Name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return c.setObjectCap(ctx, true, cap)
	}
	return err
}

// Objects is how many objects the cluster stored at its last count (0 before the first).
func (c *Cluster) Objects() int64 { return c.objects.Load() }
